/*
 * bfpatch_wbuf.h: libbfpatch_wbuf, a trainer's side of the weight buffer
 * (common/wbuf.h): create a buffer for a model layout, open it as its one
 * writer, and commit versions into it with the protocol bfpatch-shim
 * commits with (the sequence counter odd while the data changes, version
 * and state published in one store). `bfpatch publish --buffer PATH`
 * then encodes and sends each version committed there. The Python
 * package's bfpatch.Publisher calls this library through ctypes; a C or
 * C++ trainer can link it (-lbfpatch_wbuf).
 *
 * Unlike libbfpatch (bfpatch.h) this library allocates, maps files and
 * takes file locks. Every call that can fail returns 0 or -1 (NULL) and
 * writes a message of at most errlen bytes into err. A writer handle is
 * for one thread at a time; readers of the buffer (actors, the
 * publisher) take no lock and need none of this.
 */
#ifndef BFPATCH_WBUF_H
#define BFPATCH_WBUF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && !defined(BFP_WBUF_STATIC)
#define BFP_WBUF_API __attribute__((visibility("default")))
#else
#define BFP_WBUF_API
#endif

/* Raised when a function changes its contract; bindings check it. */
#define BFP_WBUF_ABI 1
BFP_WBUF_API int bfp_wbuf_abi(void);

typedef struct bfp_wbuf_writer bfp_wbuf_writer;

/* Create the buffer at path for the model whose safetensors header is
 * st_header (st_len bytes: the 8-byte length and the JSON; st_len 0: a
 * raw model of data_bytes / 2 BF16 words), holding data (data_bytes
 * bytes, the model's whole data section; NULL: zeros) as version. The
 * header is checked as the shim checks a checkpoint's: its tensors must
 * tile exactly data_bytes. The file is written beside path and renamed
 * in without replacing anything: -1 if path exists. */
BFP_WBUF_API int bfp_wbuf_create(const char *path, const void *st_header, size_t st_len,
				 const void *data, uint64_t data_bytes, uint32_t version,
				 char *err, size_t errlen);

/* Open the buffer at path as its one writer: mapped, its pages faulted
 * in writable now rather than in the first commit, and locked (an
 * exclusive flock on the file, as a shim takes: a shim or a second
 * writer on it is refused whatever path names it, until
 * bfp_wbuf_close() or the process ends). A sequence counter left odd by
 * a writer that died inside a commit's last step is made even. NULL on
 * error. */
BFP_WBUF_API bfp_wbuf_writer *bfp_wbuf_open(const char *path, char *err, size_t errlen);

/* Unmap and unlock; a commit begun and not finished stays unfinished
 * (readers see state COMMITTING and no new version). NULL is a no-op. */
BFP_WBUF_API void bfp_wbuf_close(bfp_wbuf_writer *w);

/* The committed version; the state (0 READY, 1 COMMITTING, 2 RESYNC);
 * the model's id, as frames carry it. */
BFP_WBUF_API uint32_t bfp_wbuf_version(const bfp_wbuf_writer *w);
BFP_WBUF_API uint32_t bfp_wbuf_state(const bfp_wbuf_writer *w);
BFP_WBUF_API uint64_t bfp_wbuf_model_id(const bfp_wbuf_writer *w);

/* The buffer's safetensors header (8-byte length and JSON; *len 0 for a
 * raw model), inside the mapping: valid until bfp_wbuf_close(). */
BFP_WBUF_API const void *bfp_wbuf_st_header(const bfp_wbuf_writer *w, size_t *len);

/* The data section (*data_bytes bytes, page-aligned), inside the
 * mapping: written between bfp_wbuf_begin() and bfp_wbuf_commit() only,
 * valid until bfp_wbuf_close(). */
BFP_WBUF_API void *bfp_wbuf_data(bfp_wbuf_writer *w, uint64_t *data_bytes);

/* Start the commit of version: from here readers see a commit in
 * progress (odd sequence, state COMMITTING) and no publisher takes the
 * data. version must be newer than the committed one (bfpatch publish
 * sends only newer versions): -1 if not. A commit begun and not finished
 * (the caller's copy failed, or its process died) is taken over: readers
 * never saw its data, and the new commit writes the whole section. */
BFP_WBUF_API int bfp_wbuf_begin(bfp_wbuf_writer *w, uint32_t version, char *err,
				size_t errlen);

/* Finish the commit begun: the data is flushed to the file, then version
 * and state READY are published in one store, then the sequence counter
 * is made even. -1 if no commit was begun through w. */
BFP_WBUF_API int bfp_wbuf_commit(bfp_wbuf_writer *w, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
