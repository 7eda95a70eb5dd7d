/*
 * svg.c: the report's SVG writer (see svg.h). Written for the project
 * rather than driving gnuplot so that the page needs no subprocess and no
 * extra package, and every mark can carry hover text and data-* values
 * that the browser test reads back; tests/test_svg.c covers it.
 */
#define _GNU_SOURCE
#include "svg.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int sb_reserve(sbuf *b, size_t add)
{
	if (b->oom)
		return -1;
	if (b->n + add + 1 > b->cap) {
		size_t nc = (b->n + add + 1) * 2 + 4096;
		char *np = realloc(b->p, nc);
		if (!np) {
			b->oom = 1;
			return -1;
		}
		b->p = np;
		b->cap = nc;
	}
	return 0;
}

void sb_printf(sbuf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (k < 0) {
		b->oom = 1;
		return;
	}
	if (sb_reserve(b, (size_t)k))
		return;
	va_start(ap, fmt);
	vsnprintf(b->p + b->n, (size_t)k + 1, fmt, ap);
	va_end(ap);
	b->n += (size_t)k;
}

void sb_esc(sbuf *b, const char *s)
{
	for (; s && *s; s++) {
		unsigned char c = (unsigned char)*s;
		const char *r = NULL;
		switch (c) {
		case '&': r = "&amp;"; break;
		case '<': r = "&lt;"; break;
		case '>': r = "&gt;"; break;
		case '"': r = "&quot;"; break;
		case '\'': r = "&#39;"; break;
		default: break;
		}
		if (r) {
			sb_printf(b, "%s", r);
			continue;
		}
		if (c < 0x20 && c != '\t' && c != '\n')
			c = '?';
		if (sb_reserve(b, 1))
			return;
		b->p[b->n++] = (char)c;
		b->p[b->n] = 0;
	}
}

void sb_free(sbuf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

double svg_map(const svg_axis *a, double v)
{
	double f;
	if (a->log) {
		if (!(v > 0))
			v = a->lo;
		f = (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo));
	} else {
		f = a->hi > a->lo ? (v - a->lo) / (a->hi - a->lo) : 0;
	}
	return a->px0 + f * (a->px1 - a->px0);
}

int svg_ticks(const svg_axis *a, int max, double *t, int cap)
{
	int n = 0;
	if (a->log) {
		if (!(a->lo > 0) || !(a->hi > a->lo))
			return 0;
		double e0 = floor(log10(a->lo)), e1 = ceil(log10(a->hi));
		for (double e = e0; e <= e1 && n < cap; e++) {
			double v = pow(10, e);
			if (v >= a->lo * (1 - 1e-9) && v <= a->hi * (1 + 1e-9))
				t[n++] = v;
		}
		if (n < 3) {
			n = 0;
			static const double m[3] = {1, 2, 5};
			for (double e = e0; e <= e1; e++)
				for (int i = 0; i < 3 && n < cap; i++) {
					double v = m[i] * pow(10, e);
					if (v >= a->lo * (1 - 1e-9) && v <= a->hi * (1 + 1e-9))
						t[n++] = v;
				}
		}
		return n;
	}
	if (!(a->hi > a->lo) || max < 2)
		return 0;
	double raw = (a->hi - a->lo) / (max - 1), p = pow(10, floor(log10(raw))), step = p;
	static const double m[4] = {1, 2, 5, 10};
	for (int i = 0; i < 4; i++)
		if (m[i] * p >= raw) {
			step = m[i] * p;
			break;
		}
	for (double v = ceil(a->lo / step - 1e-9) * step; v <= a->hi + step * 1e-9 && n < cap;
	     v += step)
		t[n++] = fabs(v) < step * 1e-9 ? 0 : v;
	return n;
}

void svg_si(char *out, size_t n, double v, const char *unit)
{
	static const char *pre[] = {"", "k", "M", "G", "T", "P"};
	double a = fabs(v);
	int i = 0;
	while (a >= 999.5 && i < 5) {
		a /= 1000;
		v /= 1000;
		i++;
	}
	const char *sp = unit && *unit ? " " : (i ? " " : "");
	if (a == 0 || a >= 99.95 || a == floor(a))
		snprintf(out, n, "%.0f%s%s%s", v, sp, pre[i], unit ? unit : "");
	else if (a >= 9.995)
		snprintf(out, n, "%.1f%s%s%s", v, sp, pre[i], unit ? unit : "");
	else
		snprintf(out, n, "%.2f%s%s%s", v, sp, pre[i], unit ? unit : "");
}

void svg_secs(char *out, size_t n, double s)
{
	double a = fabs(s);
	if (a == 0)
		snprintf(out, n, "0 s");
	else if (a < 1e-6)
		snprintf(out, n, "%.3g ns", s * 1e9);
	else if (a < 1e-3)
		snprintf(out, n, "%.3g us", s * 1e6);
	else if (a < 1)
		snprintf(out, n, "%.3g ms", s * 1e3);
	else if (a < 1000)
		snprintf(out, n, "%.3g s", s);
	else
		snprintf(out, n, "%.0f s", s);
}

void svg_begin(sbuf *b, int w, int h, const char *id, const char *label)
{
	sb_printf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"%d\" "
		  "height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\"", w, h, w, h);
	if (id) {
		sb_printf(b, " id=\"");
		sb_esc(b, id);
		sb_printf(b, "\"");
	}
	sb_printf(b, " role=\"img\" aria-label=\"");
	sb_esc(b, label ? label : "");
	sb_printf(b, "\">\n");
}

void svg_end(sbuf *b)
{
	sb_printf(b, "</svg>\n");
}

static void mark_tail(sbuf *b, const char *el, const char *title, const char *attrs)
{
	if (attrs)
		sb_printf(b, " %s", attrs);
	if (title) {
		sb_printf(b, "><title>");
		sb_esc(b, title);
		sb_printf(b, "</title></%s>\n", el);
	} else {
		sb_printf(b, "/>\n");
	}
}

void svg_rect(sbuf *b, double x, double y, double w, double h, const char *fill,
	      const char *title, const char *attrs)
{
	if (w < 0) {
		x += w;
		w = -w;
	}
	if (h < 0) {
		y += h;
		h = -h;
	}
	sb_printf(b, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"", x, y, w, h);
	sb_esc(b, fill);
	sb_printf(b, "\"");
	mark_tail(b, "rect", title, attrs);
}

void svg_line(sbuf *b, double x0, double y0, double x1, double y1, const char *stroke,
	      double width, const char *dash)
{
	sb_printf(b, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"", x0, y0, x1, y1);
	sb_esc(b, stroke);
	sb_printf(b, "\" stroke-width=\"%.2f\"", width);
	if (dash) {
		sb_printf(b, " stroke-dasharray=\"");
		sb_esc(b, dash);
		sb_printf(b, "\"");
	}
	sb_printf(b, "/>\n");
}

void svg_polyline(sbuf *b, const double *x, const double *y, int n, const char *stroke,
		  double width, const char *dash, const char *title, const char *attrs)
{
	sb_printf(b, "<polyline fill=\"none\" stroke=\"");
	sb_esc(b, stroke);
	sb_printf(b, "\" stroke-width=\"%.2f\"", width);
	if (dash) {
		sb_printf(b, " stroke-dasharray=\"");
		sb_esc(b, dash);
		sb_printf(b, "\"");
	}
	sb_printf(b, " points=\"");
	for (int i = 0; i < n; i++)
		sb_printf(b, "%s%.2f,%.2f", i ? " " : "", x[i], y[i]);
	sb_printf(b, "\"");
	mark_tail(b, "polyline", title, attrs);
}

void svg_circle(sbuf *b, double x, double y, double r, const char *fill, const char *title,
		const char *attrs)
{
	sb_printf(b, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"%.2f\" fill=\"", x, y, r);
	sb_esc(b, fill);
	sb_printf(b, "\"");
	mark_tail(b, "circle", title, attrs);
}

void svg_text(sbuf *b, double x, double y, const char *anchor, double size, const char *text)
{
	sb_printf(b, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"%s\" font-size=\"%.1f\">", x, y,
		  anchor, size);
	sb_esc(b, text);
	sb_printf(b, "</text>\n");
}

void svg_xaxis(sbuf *b, const svg_axis *a, double y, double grid_top, svg_fmt fmt,
	       const char *label)
{
	double t[64];
	int n = svg_ticks(a, 8, t, 64);
	svg_line(b, a->px0, y, a->px1, y, "#333", 1, NULL);
	for (int i = 0; i < n; i++) {
		char s[48];
		double x = svg_map(a, t[i]);
		svg_line(b, x, grid_top, x, y, "#ddd", 1, NULL);
		svg_line(b, x, y, x, y + 4, "#333", 1, NULL);
		fmt(s, sizeof(s), t[i]);
		svg_text(b, x, y + 16, "middle", 11, s);
	}
	if (label)
		svg_text(b, (a->px0 + a->px1) / 2, y + 32, "middle", 12, label);
}

void svg_yaxis(sbuf *b, const svg_axis *a, double x, double grid_right, svg_fmt fmt,
	       const char *label)
{
	double t[64];
	int n = svg_ticks(a, 7, t, 64);
	svg_line(b, x, a->px0, x, a->px1, "#333", 1, NULL);
	for (int i = 0; i < n; i++) {
		char s[48];
		double y = svg_map(a, t[i]);
		svg_line(b, x, y, grid_right, y, "#ddd", 1, NULL);
		svg_line(b, x - 4, y, x, y, "#333", 1, NULL);
		fmt(s, sizeof(s), t[i]);
		svg_text(b, x - 6, y + 4, "end", 11, s);
	}
	if (label) {
		double ym = (a->px0 + a->px1) / 2;
		sb_printf(b, "<text x=\"0\" y=\"0\" text-anchor=\"middle\" font-size=\"12\" "
			  "transform=\"translate(%.2f %.2f) rotate(-90)\">", x - 52, ym);
		sb_esc(b, label);
		sb_printf(b, "</text>\n");
	}
}
