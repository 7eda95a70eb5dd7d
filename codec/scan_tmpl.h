/*
 * scan_tmpl.h: the block scans of sparse encode and decode, written once
 * and compiled per instruction set by classes.c (which defines T_ATTR,
 * T_NAME, T_CLS, T_RUN and the t_* helpers before including this; and
 * optionally T_GRUN, t_grun_zero, t_grun_store and t_gcount_row, the
 * gather's own way to count, else the same as the others'; and t_low,
 * the low l bits of a mask, else by a shifted mask; T_POSITIONS_ONLY
 * compiles the decoder's positions alone). Each
 * 64-element block yields its class bytes and one row of 16 counts: how
 * many elements of each base-exponent class come before the block in its
 * chunk. A change's rank in its class is that count plus a popcount of
 * its class mask below it.
 */

/* Gather the changes from e->pos up to end (FORMAT.md 3.4): offset, class,
 * gap in the class's rank space and step. Stops once the running estimate
 * exceeds limit_bits or the scratch is full. Returns the first position
 * not examined.
 *
 * Two passes per GATHER_CHUNK elements keep data-dependent branches out
 * of the per-change work: the first computes each block's change mask,
 * class bytes and per-class counts before the block, and lists the
 * changes (the first four of a block without branches); the second
 * walks that list in a loop of known length. With snap (a constant at
 * each use) it also keeps the class counts every BFP_SNAP_EVERY elements
 * in e->bat_snap, for the frames that take their changes from these
 * (encode.c, the batch). */
#ifndef T_POSITIONS_ONLY
#define GATHER_CHUNK 1024u
#ifndef T_GRUN
#define T_GRUN T_RUN
#define t_grun_zero t_run_zero
#define t_grun_store t_run_store
#define t_gcount_row t_count_row
#define T_GRUN_SAME 1
#endif
#ifndef t_low
#define t_low(m, l) ((m) & ((1ull << (l)) - 1))
#define T_LOW_SAME 1
#endif
T_ATTR static inline __attribute__((always_inline)) uint64_t
T_NAME(gather_t)(bfp_enc *e, uint64_t end, uint64_t limit_bits, const int snap)
{
	const uint64_t s = e->pos;
	uint64_t cnt[BFP_CLASSES] = {0}, next[BFP_CLASSES] = {0};
	uint64_t est = 16 + 8 * 10;
	uint32_t n = 0;
	uint64_t i0 = s;
	uint8_t cb[GATHER_CHUNK] __attribute__((aligned(64)));
	uint16_t idx[GATHER_CHUNK + 4];
	uint16_t rows[GATHER_CHUNK / 64][BFP_CLASSES] __attribute__((aligned(64)));
	uint16_t tot[BFP_CLASSES] __attribute__((aligned(64)));

	if (snap)
		e->bat_nsnap = 0;
	while (i0 < end) {
		uint32_t cn = end - i0 < GATHER_CHUNK ? (uint32_t)(end - i0) : GATHER_CHUNK;
		T_GRUN run = t_grun_zero();
		uint32_t ni = 0;
		if (snap && ((i0 - s) & (BFP_SNAP_EVERY - 1)) == 0 && e->bat_nsnap < BFP_SNAP_MAX) {
			for (unsigned c = 0; c < BFP_CLASSES; c++)
				e->bat_snap[e->bat_nsnap][c] = (uint32_t)cnt[c];
			e->bat_nsnap++;
		}
		for (uint32_t off = 0; off < cn; off += 64) {
			unsigned len = cn - off < 64 ? cn - off : 64u;
			const uint16_t *b = e->base + i0 + off;
			__builtin_prefetch(b + 1024);
			__builtin_prefetch(b + 1024 + 32);
			__builtin_prefetch(e->target + i0 + off + 1024);
			__builtin_prefetch(e->target + i0 + off + 1024 + 32);
			uint64_t neq = t_neq(b, e->target + i0 + off, len);
			T_CLS k = t_classes(b, len);
			t_cls_store(cb + off, k);
			run = t_gcount_row(k, run, rows[off / 64]);
			/* list the changes: four without branches (slots past the
			 * block's count are overwritten later), the rest in a loop */
			const uint64_t top = 1ull << 63;
			uint64_t x = neq;
			for (unsigned q = 0; q < 4; q++) {
				idx[ni + q] = (uint16_t)(off + (unsigned)__builtin_ctzll(x | top));
				x &= x - 1;
			}
			unsigned pc = t_popcnt(neq);
			for (unsigned q = 4; x; q++) {
				idx[ni + q] = (uint16_t)(off + (unsigned)__builtin_ctzll(x));
				x &= x - 1;
			}
			ni += pc;
		}
		t_grun_store(run, tot);
		const uint16_t *b = e->base + i0;
		const uint16_t *t = e->target + i0;
		for (uint32_t q = 0; q < ni; q++) {
			unsigned p = idx[q], blk = p / 64, l = p % 64;
			unsigned c = cb[p];
			uint64_t rank = cnt[c] + rows[blk][c] +
					t_popcnt(t_low(t_cmask_mem(cb + blk * 64, c), l));
			uint32_t gap = (uint32_t)(rank - next[c]);
			uint16_t d = (uint16_t)(bfp_key(t[p]) - bfp_key(b[p]));
			unsigned m = (unsigned)((int16_t)d < 0 ? -(int32_t)(int16_t)d : (int16_t)d);
			next[c] = rank + 1;
			e->chg_pos[n] = (uint32_t)(i0 + p - s);
			e->chg_class[n] = (uint8_t)c;
			e->chg_rank[n] = gap;
			e->chg_delta[n] = d;
			est += bfp_gather_est(gap, m);
			n++;
			if (BFP_UNLIKELY(n == BFP_CHANGES_MAX || est > limit_bits)) {
				e->n_changes = n;
				return i0 + p + 1;
			}
		}
		for (unsigned c = 0; c < BFP_CLASSES; c++)
			cnt[c] += tot[c];
		i0 += cn;
	}
	e->n_changes = n;
	return end;
}

T_ATTR static uint64_t T_NAME(gather)(bfp_enc *e, uint64_t end, uint64_t limit_bits)
{
	return T_NAME(gather_t)(e, end, limit_bits, 0);
}

T_ATTR static uint64_t T_NAME(gather_snap)(bfp_enc *e, uint64_t end)
{
	return T_NAME(gather_t)(e, end, UINT64_MAX, 1);
}

/* Add the number of elements of each class among base[0, n) to cnt. */
T_ATTR static void T_NAME(class_counts)(const uint16_t *base, uint64_t n,
					uint64_t cnt[BFP_CLASSES])
{
	uint16_t row[BFP_CLASSES] __attribute__((aligned(64)));
	uint16_t tot[BFP_CLASSES] __attribute__((aligned(64)));
	for (uint64_t i0 = 0; i0 < n; i0 += GATHER_CHUNK) {
		uint32_t cn = n - i0 < GATHER_CHUNK ? (uint32_t)(n - i0) : GATHER_CHUNK;
		T_RUN run = t_run_zero();
		for (uint32_t off = 0; off < cn; off += 64) {
			__builtin_prefetch(base + i0 + off + 1024);
			__builtin_prefetch(base + i0 + off + 1024 + 32);
			T_CLS k = t_classes(base + i0 + off, cn - off < 64 ? cn - off : 64u);
			run = t_count_row(k, run, row);
		}
		t_run_store(run, tot);
		for (unsigned c = 0; c < BFP_CLASSES; c++)
			cnt[c] += tot[c];
	}
}
#endif /* T_POSITIONS_ONLY */

/* Turn per-class gaps into positions (FORMAT.md 3.4). gaps and steps are
 * grouped by class (start[c] .. start[c+1]); writes pos/val of every
 * change, ordered by BFP_SCAN_CHUNK-element chunk (within a chunk, by
 * class). Per chunk, a first pass stores the class bytes and the rows of
 * counts, turned into one line per class (how many of its elements
 * precede each 64-element block); then each change finds its block by
 * counting the blocks whose count is at most its rank (a vector compare,
 * no branch) and its lane by a select in that block's class mask.
 * Returns BFP_E_CORRUPT when a gap runs past the last element of its
 * class. */
T_ATTR static bfp_status T_NAME(positions)(const uint16_t *base, uint32_t len,
					   const uint32_t start[BFP_CLASSES + 1],
					   const uint32_t *gaps, const uint16_t *steps,
					   uint32_t *pos, uint16_t *val)
{
	enum { NB = BFP_SCAN_CHUNK / 64 };
	/* rel[c]: rank of class c's next change among the class's elements
	 * from the chunk's start */
	uint64_t rel[BFP_CLASSES] = {0};
	uint32_t idx[BFP_CLASSES];
	uint32_t active = 0, o = 0;
	uint8_t cb[BFP_SCAN_CHUNK] __attribute__((aligned(64)));
	uint16_t rows[NB][BFP_CLASSES] __attribute__((aligned(64)));
	uint16_t run[BFP_CLASSES] __attribute__((aligned(64)));
	/* before[c][k]: elements of class c in blocks 0..k-1 of the chunk;
	 * 0xFFFF past the chunk's last block (never at most a rank) */
	uint16_t before[BFP_CLASSES][NB] __attribute__((aligned(64)));

	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		idx[c] = start[c];
		if (start[c] < start[c + 1]) {
			active |= 1u << c;
			rel[c] = gaps[start[c]];
		}
	}
	for (uint32_t i0 = 0; i0 < len && active; i0 += BFP_SCAN_CHUNK) {
		uint32_t cn = len - i0 < BFP_SCAN_CHUNK ? len - i0 : BFP_SCAN_CHUNK;
		uint32_t nb = (cn + 63) / 64;
		const uint16_t *b = base + i0;
		T_RUN counts = t_run_zero();
		for (uint32_t k = 0; k < nb; k++) {
			uint32_t off = k * 64;
			/* the next chunk, while this one's changes are placed */
			__builtin_prefetch(b + off + BFP_SCAN_CHUNK);
			__builtin_prefetch(b + off + BFP_SCAN_CHUNK + 32);
			T_CLS cls = t_classes(b + off, cn - off < 64 ? cn - off : 64u);
			t_cls_store(cb + off, cls);
			counts = t_count_row(cls, counts, rows[k]);
		}
		t_run_store(counts, run);
		if (nb < NB)
			BFP_MEMSET(rows[nb], 0xFF, sizeof(rows[0]) * (NB - nb));
		t_transpose(rows, before);
		uint32_t *po = pos + o;
		uint16_t *vo = val + o;
		for (uint32_t a = active; a; a &= a - 1) {
			const unsigned c = (unsigned)__builtin_ctz(a);
			const uint32_t rc = run[c];
			uint64_t rr = rel[c];
			const uint32_t *g = gaps + idx[c];
			const uint32_t *const gend = gaps + start[c + 1];
			const uint16_t *st = steps + idx[c];
			while (rr < rc) {
				unsigned r = (unsigned)rr;
				unsigned k = t_blocks_upto(before[c], r) - 1;
				uint64_t m = t_cmask_mem(cb + k * 64, c);
				unsigned l = t_select(m, r - before[c][k]);
				uint32_t p = k * 64 + l;
				*po++ = i0 + p;
				*vo++ = bfp_unkey((uint16_t)(bfp_key(b[p]) + *st++));
				if (++g == gend) {
					active &= ~(1u << c);
					break;
				}
				rr += (uint64_t)*g + 1;
			}
			rel[c] = rr - rc;
			idx[c] = (uint32_t)(g - gaps);
		}
		o = (uint32_t)(po - pos);
	}
	return active ? BFP_E_CORRUPT : BFP_OK;
}

#ifdef T_GRUN_SAME
#undef T_GRUN
#undef t_grun_zero
#undef t_grun_store
#undef t_gcount_row
#undef T_GRUN_SAME
#endif
#ifdef T_LOW_SAME
#undef t_low
#undef T_LOW_SAME
#endif
