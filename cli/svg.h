/*
 * svg.h: a small SVG writer for bfpatch report: a growable text buffer
 * with XML escaping, linear and logarithmic axes with readable ticks, and
 * the few marks the report draws (rectangles, lines, polylines, text).
 * Every mark may carry a <title> (the browser's hover text) and extra
 * attributes (data-* for tests). Output is well-formed XML.
 */
#ifndef BFP_SVG_H
#define BFP_SVG_H

#include <stddef.h>

/* Text buffer; zero-initialise. After an allocation failure oom is set and
 * further writes are dropped: check oom once at the end. */
typedef struct sbuf {
	char *p;
	size_t n, cap;
	int oom;
} sbuf;

void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append s with &, <, >, " and ' escaped (text and attribute values);
 * control characters other than tab and newline become '?'. */
void sb_esc(sbuf *b, const char *s);
void sb_free(sbuf *b);

/* An axis maps data [lo, hi] to pixels [px0, px1] (px1 < px0 for y). A log
 * axis needs 0 < lo < hi. */
typedef struct svg_axis {
	double lo, hi;
	double px0, px1;
	int log;
} svg_axis;

double svg_map(const svg_axis *a, double v);

/* Ticks: linear axes get steps of 1, 2 or 5 times a power of ten (at most
 * max ticks); log axes get the powers of ten inside [lo, hi] (and 2x, 5x
 * when there are fewer than three). Returns the count written to t. */
int svg_ticks(const svg_axis *a, int max, double *t, int cap);

/* Human-readable numbers: "1.5 k", "12 M" style (SI prefix, 3 significant
 * digits) followed by unit, into out. */
void svg_si(char *out, size_t n, double v, const char *unit);
/* Seconds as "10 ns", "850 us", "12.3 ms", "4.2 s" (3 significant digits). */
void svg_secs(char *out, size_t n, double s);

/* Open an <svg> of w x h pixels with class "chart" and an aria-label. */
void svg_begin(sbuf *b, int w, int h, const char *id, const char *label);
void svg_end(sbuf *b);

/* Marks. fill/stroke are CSS colours; title (hover text) and attrs (raw,
 * already-escaped attribute text such as data-x="1") may be NULL. */
void svg_rect(sbuf *b, double x, double y, double w, double h, const char *fill,
	      const char *title, const char *attrs);
void svg_line(sbuf *b, double x0, double y0, double x1, double y1, const char *stroke,
	      double width, const char *dash);
void svg_polyline(sbuf *b, const double *x, const double *y, int n, const char *stroke,
		  double width, const char *dash, const char *title, const char *attrs);
void svg_circle(sbuf *b, double x, double y, double r, const char *fill, const char *title,
		const char *attrs);
/* anchor: "start", "middle" or "end". */
void svg_text(sbuf *b, double x, double y, const char *anchor, double size, const char *text);

/* Axis with ticks, grid lines across [other0, other1] and a label;
 * fmt formats a tick value. */
typedef void (*svg_fmt)(char *out, size_t n, double v);
void svg_xaxis(sbuf *b, const svg_axis *a, double y, double grid_top, svg_fmt fmt,
	       const char *label);
void svg_yaxis(sbuf *b, const svg_axis *a, double x, double grid_right, svg_fmt fmt,
	       const char *label);

#endif
