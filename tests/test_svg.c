/*
 * test_svg.c: the report's SVG writer escapes every text it is given,
 * places ticks at readable values inside the axis, maps data to pixels
 * exactly at the ends of an axis, and formats numbers for labels.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "svg.h"

/* Markup characters in text and attributes never reach the output raw;
 * control characters are replaced. */
static void test_text_is_escaped(void **state)
{
	(void)state;
	sbuf b = {0};
	sb_esc(&b, "a<b>&\"c'\x01");
	assert_false(b.oom);
	assert_string_equal(b.p, "a&lt;b&gt;&amp;&quot;c&#39;?");
	sb_free(&b);
	svg_text(&b, 1, 2, "start", 10, "</text><script>");
	assert_null(strstr(b.p, "<script>"));
	assert_non_null(strstr(b.p, "&lt;/text&gt;&lt;script&gt;"));
	sb_free(&b);
	svg_rect(&b, 0, 0, 1, 1, "red\"", "t<i>tle", NULL);
	assert_non_null(strstr(b.p, "fill=\"red&quot;\""));
	assert_non_null(strstr(b.p, "<title>t&lt;i&gt;tle</title></rect>"));
	sb_free(&b);
}

/* A rectangle of negative width or height is drawn as the same area with a
 * positive size (SVG ignores negative sizes). */
static void test_negative_rect_is_normalised(void **state)
{
	(void)state;
	sbuf b = {0};
	svg_rect(&b, 10, 20, -4, -6, "#000", NULL, "data-x=\"1\"");
	assert_string_equal(b.p, "<rect x=\"6.00\" y=\"14.00\" width=\"4.00\" height=\"6.00\" "
				 "fill=\"#000\" data-x=\"1\"/>\n");
	sb_free(&b);
}

/* Axis ends map to the pixel ends, linear and log; log axes map decades
 * evenly. */
static void test_axis_maps_ends_and_decades(void **state)
{
	(void)state;
	svg_axis a = {0, 10, 100, 200, 0};
	assert_true(svg_map(&a, 0) == 100 && svg_map(&a, 10) == 200 && svg_map(&a, 5) == 150);
	svg_axis y = {1, 1000, 400, 100, 1};
	assert_true(svg_map(&y, 1) == 400);
	double m10 = svg_map(&y, 10), m100 = svg_map(&y, 100);
	assert_true(m10 > 299.99 && m10 < 300.01 && m100 > 199.99 && m100 < 200.01);
	assert_true(svg_map(&y, 1000) > 99.99 && svg_map(&y, 1000) < 100.01);
}

/* Linear ticks are steps of 1, 2 or 5 times a power of ten within the
 * axis; log ticks are the decades (with 2x and 5x when they are few). */
static void test_ticks_are_readable_and_inside(void **state)
{
	(void)state;
	double t[64];
	svg_axis a = {0, 10, 0, 100, 0};
	int n = svg_ticks(&a, 6, t, 64);
	assert_int_equal(n, 6);
	for (int i = 0; i < n; i++)
		assert_true(t[i] == 2.0 * i);
	svg_axis b = {0, 1.05e5, 0, 100, 0};
	n = svg_ticks(&b, 8, t, 64);
	assert_true(n >= 2 && n <= 8 && t[0] == 0 && t[n - 1] <= 1.05e5);
	assert_true(t[1] == 2e4);
	svg_axis l = {1e-6, 1e5, 0, 100, 1};
	n = svg_ticks(&l, 8, t, 64);
	assert_int_equal(n, 12);
	assert_true(t[0] == 1e-6 && t[11] > 0.99e5 && t[11] < 1.01e5);
	svg_axis s = {1, 10, 0, 100, 1};
	n = svg_ticks(&s, 8, t, 64);
	assert_int_equal(n, 4); /* 1 2 5 10 */
	assert_true(t[1] == 2 && t[2] == 5);
	svg_axis bad = {0, 10, 0, 100, 1};
	assert_int_equal(svg_ticks(&bad, 8, t, 64), 0);
}

/* Labels: SI prefixes with three significant digits; seconds in ns, us, ms, s. */
static void test_numbers_are_formatted(void **state)
{
	(void)state;
	char o[32];
	svg_si(o, sizeof(o), 1e9, "bit/s");
	assert_string_equal(o, "1 Gbit/s");
	svg_si(o, sizeof(o), 28189, "B");
	assert_string_equal(o, "28.2 kB");
	svg_si(o, sizeof(o), 2230528, "B");
	assert_string_equal(o, "2.23 MB");
	svg_si(o, sizeof(o), 0, "B");
	assert_string_equal(o, "0 B");
	svg_secs(o, sizeof(o), 0.0197);
	assert_string_equal(o, "19.7 ms");
	svg_secs(o, sizeof(o), 2.3088);
	assert_string_equal(o, "2.31 s");
	svg_secs(o, sizeof(o), 0.0006);
	assert_string_equal(o, "600 us");
	svg_secs(o, sizeof(o), 1e-8);
	assert_string_equal(o, "10 ns");
}

/* The chart element carries class "chart", its id and an escaped label. */
static void test_chart_element(void **state)
{
	(void)state;
	sbuf b = {0};
	svg_begin(&b, 300, 200, "c1", "bytes & time");
	svg_end(&b);
	assert_non_null(strstr(b.p, "class=\"chart\""));
	assert_non_null(strstr(b.p, "id=\"c1\""));
	assert_non_null(strstr(b.p, "aria-label=\"bytes &amp; time\""));
	assert_non_null(strstr(b.p, "</svg>\n"));
	sb_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_text_is_escaped),
		cmocka_unit_test(test_negative_rect_is_normalised),
		cmocka_unit_test(test_axis_maps_ends_and_decades),
		cmocka_unit_test(test_ticks_are_readable_and_inside),
		cmocka_unit_test(test_numbers_are_formatted),
		cmocka_unit_test(test_chart_element),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
