/*
 * rbd_codec.h - the decoders of what the gateways of an rbd image write
 * into the cluster for each other (rbd_codec.c): the owner's hot set
 * (rbd_hotset.c), the ownership record and the hand-over request
 * (rbd_own.c), the shared reservation record's notices and answers
 * (rbd_pr.c; the record itself is pr_text.c's). Pure: no librados, no
 * I/O, so that they are unit tested and fuzzed (tests/fuzz/fuzz_rbd_codec.c)
 * without a cluster.
 *
 * What another gateway wrote is input like a PDU: a damaged or foreign
 * object is refused whole (-EBADMSG), never half read, and a number is
 * taken only in the form its writer prints (no sign, no leading zero, no
 * value that wraps), so a garbled digit cannot turn into another gateway's
 * id or a counter that wraps at its next step.
 */
#ifndef HOTLUN_ORIGIN_RBD_CODEC_H
#define HOTLUN_ORIGIN_RBD_CODEC_H

#include "hotlun/origin.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The hot set object: header line, then entries, then changed ranges (rbd_hotset.c). */
#define RBD_HOT_MAX     131072u /* entries, 12 bytes each (1.5 MiB) */
#define RBD_HOT_ENT     12u
#define RBD_HOT_HDR_MAX 640u
#define RBD_CHG_MAX     65536u /* changed ranges, 16 bytes each (1 MiB) */
#define RBD_CHG_ENT     16u
/* The largest hot set object a reader takes. */
#define RBD_HOT_OBJ_MAX                                                                            \
	(RBD_HOT_HDR_MAX + (uint64_t)RBD_HOT_MAX * RBD_HOT_ENT +                                   \
	 (uint64_t)RBD_CHG_MAX * RBD_CHG_ENT)

/*
 * The hot set object's size bytes into *out (v and chg malloc'ed, the
 * caller frees them; age_ms left 0). @return 0, -EBADMSG (damaged: *out
 * holds nothing to free) or -ENOMEM.
 */
int rbd_hot_decode(const void *data, size_t size, struct hl_hot_set *out);

/* The ownership record hotlun_owner.IMAGEID (rbd_own.c). */
struct rbd_own_record {
	uint16_t owner;
	uint64_t epoch, beat, done;
	uint32_t lease_ms; /* the writer's lease; 0: not said (an older hotlund) */
	bool released;
	bool fence; /* released-fence */
	char addr[128];
};

/* The record's longest text (a reader reads no more). */
#define RBD_OWN_RECORD_MAX 384

/*
 * The record's text (NUL-terminated) into *rec. An empty text is "nobody,
 * ever" (a standby created the object empty, to watch it). @return 0 or
 * -EBADMSG (*rec zeroed).
 */
int rbd_own_record_decode(const char *text, struct rbd_own_record *rec);

/*
 * The hand-over request hotlun_request.IMAGEID, "gw=R seq=N" (NUL-terminated
 * text). @return 0 or -EBADMSG (*gw and *seq 0).
 */
int rbd_own_request_decode(const char *text, uint16_t *gw, uint64_t *seq);

/*
 * A notice of the shared reservation record, "seq=N", and a gateway's
 * answer to it, "gw=G" (payloads of len bytes, not NUL-terminated; data
 * may be NULL when len is 0). @return 0 or -EBADMSG (*seq, *gw 0).
 */
int rbd_pr_notice_decode(const void *data, size_t len, uint64_t *seq);
int rbd_pr_answer_decode(const void *data, size_t len, uint16_t *gw);

#endif
