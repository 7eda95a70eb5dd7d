/*
 * scan_undef.h: undefine scan_tmpl.h's parameters (T_*, t_*) after the
 * last instantiation of a family in classes.c, so the next one starts
 * clean. Undefining a name that is not defined is harmless.
 */
#undef T_ATTR
#undef T_NAME
#undef T_CLS
#undef T_RUN
#undef T_GRUN
#undef t_classes
#undef t_run_zero
#undef t_run_store
#undef t_count_row
#undef t_grun_zero
#undef t_grun_store
#undef t_gcount_row
#undef t_transpose
#undef t_cls_store
#undef t_cmask_mem
#undef t_neq
#undef t_popcnt
#undef t_select
#undef t_blocks_upto
#undef t_low
