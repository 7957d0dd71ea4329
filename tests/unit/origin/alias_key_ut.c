/*
 * alias_key_ut.c - what names an origin's data: the URI keys of the
 * config-time alias check (hl_origin_alias_key, origin_iscsi_url_key), the
 * LUN designator a SAN's VPD page 83h gives (origin_iscsi_lu_designator),
 * and the "excl:" proofs that carry a stack's lasting data_id.
 */
#include "config.h"

#include "hl_test.h"
#include "origin/origin_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char key_a[HL_ORIGIN_ID_MAX], key_b[HL_ORIGIN_ID_MAX];

/* Do URIs a and b get one alias key? (Both must get one.) */
static bool same_key(const char *a, const char *b)
{
	CU_ASSERT_EQUAL_FATAL(hl_origin_alias_key(a, key_a, sizeof(key_a)), 0);
	CU_ASSERT_EQUAL_FATAL(hl_origin_alias_key(b, key_b, sizeof(key_b)), 0);
	return strcmp(key_a, key_b) == 0;
}

static void test_iscsi_spellings(void)
{
	const char *base = "iscsi://san.example/iqn.2026-11.io.x:t/3";

	CU_ASSERT_EQUAL(hl_origin_alias_key(base, key_a, sizeof(key_a)), 0);
	CU_ASSERT_STRING_EQUAL(key_a, "iscsi://san.example:3260/iqn.2026-11.io.x:t/3");
	CU_ASSERT(same_key(base, "iscsi://SAN.Example:3260/iqn.2026-11.io.x:t/3"));
	CU_ASSERT(same_key(base, "ISCSI://san.example/IQN.2026-11.io.X:T/3"));
	CU_ASSERT(same_key(base, "iscsi://user%secret@san.example/iqn.2026-11.io.x:t/3"));
	CU_ASSERT(same_key(base, "iscsi://san.example/iqn.2026-11.io.x:t/3?qd=4&timeout=9"));
	CU_ASSERT(same_key(base, "iscsi://san.example/iqn.2026-11.io.x:t/3?initiator=iqn.a:b"));
	CU_ASSERT(same_key("iscsi://[::1]/iqn.a:b/0", "iscsi://[0:0:0:0:0:0:0:1]:3260/iqn.a:b/0"));
	CU_ASSERT(same_key("iscsi://[FE80::1]/iqn.a:b/0", "iscsi://[fe80::0:1]/iqn.a:b/0"));
	/* the secret never reaches a key */
	CU_ASSERT_EQUAL(hl_origin_alias_key("iscsi://u%hunter2@h/iqn.a:b/0", key_a, 200), 0);
	CU_ASSERT_PTR_NULL(strstr(key_a, "hunter2"));
	CU_ASSERT_PTR_NULL(strstr(key_a, "u%"));
	/* other port, target or LUN: other data */
	CU_ASSERT_FALSE(same_key(base, "iscsi://san.example:3261/iqn.2026-11.io.x:t/3"));
	CU_ASSERT_FALSE(same_key(base, "iscsi://san.example/iqn.2026-11.io.x:u/3"));
	CU_ASSERT_FALSE(same_key(base, "iscsi://san.example/iqn.2026-11.io.x:t/4"));
	CU_ASSERT_FALSE(same_key(base, "iscsi://other.example/iqn.2026-11.io.x:t/3"));
	/* what the parser refuses keys by its text (open refuses it anyway) */
	CU_ASSERT_EQUAL(hl_origin_alias_key("iscsi://h/t", key_a, sizeof(key_a)), 0);
	CU_ASSERT_STRING_EQUAL(key_a, "uri:iscsi://h/t");
	CU_ASSERT_EQUAL(hl_origin_alias_key("iscsi://u%hunter2@h/t", key_a, sizeof(key_a)), 0);
	CU_ASSERT_STRING_EQUAL(key_a, "uri:iscsi://h/t");
	CU_ASSERT_EQUAL(hl_origin_alias_key("nbd://u%hunter2@h/x", key_a, sizeof(key_a)), 0);
	CU_ASSERT_STRING_EQUAL(key_a, "uri:nbd://h/x");
	/* a key that does not fit */
	CU_ASSERT_EQUAL(hl_origin_alias_key(base, key_a, 16), -ENAMETOOLONG);
}

static void test_file_and_others(void)
{
	char dir[] = "/tmp/alias_key_ut.XXXXXX", a[64], l[64], u1[80], u2[80];
	FILE *f;

	CU_ASSERT_FATAL(mkdtemp(dir) != NULL);
	snprintf(a, sizeof(a), "%s/a.img", dir);
	snprintf(l, sizeof(l), "%s/link.img", dir);
	f = fopen(a, "w");
	CU_ASSERT_FATAL(f != NULL);
	fclose(f);
	CU_ASSERT_EQUAL_FATAL(symlink(a, l), 0);
	snprintf(u1, sizeof(u1), "file:%s", a);
	snprintf(u2, sizeof(u2), "FILE:%s", l);
	CU_ASSERT(same_key(u1, a));
	CU_ASSERT(same_key(u1, u2)); /* a link and the scheme's case: one file */
	CU_ASSERT_EQUAL(strncmp(key_a, "file:", 5), 0);
	CU_ASSERT(same_key("/dev/null", "file:/dev/null"));
	CU_ASSERT(same_key("/no/such/file", "file:/no/such/file"));
	CU_ASSERT_STRING_EQUAL(key_a, "path:/no/such/file");
	CU_ASSERT_FALSE(same_key("/no/such/file", "/no/such/other"));
	CU_ASSERT_FALSE(same_key(u1, "/dev/null"));
	/* rbd: pool, image, snapshot, as written */
	CU_ASSERT(same_key("rbd:pool/img", "RBD:pool/img"));
	CU_ASSERT_FALSE(same_key("rbd:pool/img", "rbd:pool/img@snap"));
	CU_ASSERT_FALSE(same_key("rbd:pool/img", "rbd:Pool/img"));
	/* an iscsi key never equals a file key */
	CU_ASSERT_FALSE(same_key("iscsi://h/iqn.a:b/0", "/tmp"));
	unlink(l);
	unlink(a);
	rmdir(dir);
}

/* A VPD page 83h of the descriptors given as (byte 0, byte 1, bytes) triples. */
static size_t vpd83(uint8_t *p, const uint8_t (*d)[2], const char *const *v, size_t n)
{
	size_t off = 4;

	memset(p, 0, 4);
	p[1] = 0x83;
	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(v[i]);

		p[off] = d[i][0];
		p[off + 1] = d[i][1];
		p[off + 2] = 0;
		p[off + 3] = (uint8_t)len;
		memcpy(p + off + 4, v[i], len);
		off += 4 + len;
	}
	p[2] = (uint8_t)((off - 4) >> 8);
	p[3] = (uint8_t)(off - 4);
	return off;
}

static void test_lu_designator(void)
{
	uint8_t page[512];
	char id[128];
	/* T10 vendor id, a target port's NAA, the LU's EUI-64, the LU's NAA */
	const uint8_t d[][2] = {{0x02, 0x01}, {0x51, 0x93}, {0x01, 0x02}, {0x01, 0x03}};
	const char *v[] = {"IET     00010001", "\x60\x01", "\xaa\xbb", "\x60\x0a\x0b"};
	size_t n = vpd83(page, d, v, 4);

	CU_ASSERT_EQUAL(origin_iscsi_lu_designator(page, n, id, sizeof(id)), 0);
	CU_ASSERT_STRING_EQUAL(id, "scsi-lu:naa:600a0b");
	/* without the NAA: the EUI-64; the port's NAA never counts */
	n = vpd83(page, d, v, 3);
	CU_ASSERT_EQUAL(origin_iscsi_lu_designator(page, n, id, sizeof(id)), 0);
	CU_ASSERT_STRING_EQUAL(id, "scsi-lu:eui64:aabb");
	/* only a T10 vendor id and a port's designator: none */
	n = vpd83(page, d, v, 2);
	CU_ASSERT_EQUAL(origin_iscsi_lu_designator(page, n, id, sizeof(id)), -ENOENT);
	/* a page cut inside the last descriptor: that one is not read */
	n = vpd83(page, d, v, 4);
	CU_ASSERT_EQUAL(origin_iscsi_lu_designator(page, n - 1, id, sizeof(id)), 0);
	CU_ASSERT_STRING_EQUAL(id, "scsi-lu:eui64:aabb");
	/* a page length past what came: only what came */
	page[2] = 0xff;
	CU_ASSERT_EQUAL(origin_iscsi_lu_designator(page, n, id, sizeof(id)), 0);
	CU_ASSERT_STRING_EQUAL(id, "scsi-lu:naa:600a0b");
	/* not page 83h, too short, too small a buffer */
	page[1] = 0x80;
	CU_ASSERT_EQUAL(origin_iscsi_lu_designator(page, n, id, sizeof(id)), -ENOENT);
	page[1] = 0x83;
	CU_ASSERT_EQUAL(origin_iscsi_lu_designator(page, 3, id, sizeof(id)), -ENOENT);
	CU_ASSERT_EQUAL(origin_iscsi_lu_designator(NULL, 0, id, sizeof(id)), -ENOENT);
	CU_ASSERT_EQUAL(origin_iscsi_lu_designator(page, n, id, 16), -ENAMETOOLONG);
}

/* ---- "excl:" proofs of a stack with (or without) a lasting data_id ---- */

static const char *fake_id; /* NULL: the fake origin has none */
static bool fake_lasting = true;

static int fake_submit(struct hl_origin *o, struct hl_origin_io *io)
{
	(void)o;
	io->cb(io, 0);
	return 0;
}

static void fake_close(struct hl_origin *o)
{
	(void)o;
}

static int fake_open(struct hl_origin *o, const char *target, const struct hl_origin_opts *opts)
{
	(void)o, (void)target, (void)opts;
	return 0;
}

static int fake_data_id(struct hl_origin *o, char *buf, size_t len, bool *lasting)
{
	(void)o;
	if (!fake_id)
		return -EOPNOTSUPP;
	*lasting = fake_lasting;
	return snprintf(buf, len, "%s", fake_id) < (int)len ? 0 : -EOPNOTSUPP;
}

static const struct hl_origin_ops fake_ops = {
    .name = "fake",
    .scheme = "fake:",
    .open = fake_open,
    .close = fake_close,
    .submit = fake_submit,
    .data_id = fake_data_id,
};

static struct hl_origin *fake_origin(void)
{
	struct hl_origin *o;

	CU_ASSERT_FATAL(origin_alloc(&fake_ops, "fake:x", &o) == 0);
	o->size = 1 << 20;
	o->sole_writer = true;
	return o;
}

static int check(struct hl_origin *o, const char *proof, char *why)
{
	return hl_origin_proof_check(o, "t", proof, NULL, NULL, why, HL_ORIGIN_WHY_MAX);
}

static void test_excl_identity(void)
{
	char proof[HL_ORIGIN_PROOF_MAX], old[HL_ORIGIN_PROOF_MAX], why[HL_ORIGIN_WHY_MAX];
	char long_id[300];
	struct hl_origin *o = fake_origin();

	fake_id = "scsi-lu:naa:600a0b";
	CU_ASSERT_EQUAL(hl_origin_proof_take(o, "t", true, proof, sizeof(proof)), 0);
	CU_ASSERT_STRING_EQUAL(proof, "excl:1048576:scsi-lu:naa:600a0b");
	CU_ASSERT_EQUAL(check(o, proof, why), 0);
	CU_ASSERT_STRING_EQUAL(why, "exclusive = yes");
	/* another LUN of the same size behind the same URL */
	fake_id = "scsi-lu:naa:600a0c";
	CU_ASSERT_EQUAL(check(o, proof, why), -ESTALE);
	CU_ASSERT_STRING_EQUAL(why, "origin identity changed");
	/* an older proof without identity, for a stack that has one now: cold */
	CU_ASSERT_EQUAL(check(o, "excl:1048576", why), -ESTALE);
	CU_ASSERT_STRING_EQUAL(why, "origin identity not recorded (older proof)");
	CU_ASSERT_EQUAL(check(o, "excl:4096:scsi-lu:naa:600a0c", why), -ESTALE);
	CU_ASSERT_STRING_EQUAL(why, "origin size changed");
	/* no designator (or none that lasts): excl:SIZE, as before */
	fake_id = NULL;
	CU_ASSERT_EQUAL(hl_origin_proof_take(o, "t", true, old, sizeof(old)), 0);
	CU_ASSERT_STRING_EQUAL(old, "excl:1048576");
	CU_ASSERT_EQUAL(check(o, old, why), 0);
	CU_ASSERT_EQUAL(check(o, proof, why), -ESTALE);
	CU_ASSERT_STRING_EQUAL(why, "origin has no identity now");
	fake_id = "file:1:2";
	fake_lasting = false;
	CU_ASSERT_EQUAL(hl_origin_proof_take(o, "t", true, old, sizeof(old)), 0);
	CU_ASSERT_STRING_EQUAL(old, "excl:1048576");
	fake_lasting = true;
	/* a long identity goes in hashed, still one per identity */
	memset(long_id, 'x', sizeof(long_id) - 1);
	long_id[sizeof(long_id) - 1] = '\0';
	fake_id = long_id;
	CU_ASSERT_EQUAL(hl_origin_proof_take(o, "t", true, proof, sizeof(proof)), 0);
	CU_ASSERT(strlen(proof) < 64);
	CU_ASSERT_EQUAL(check(o, proof, why), 0);
	long_id[5] = 'y';
	CU_ASSERT_EQUAL(check(o, proof, why), -ESTALE);
	/* what a cache's disown looks for in its proofs */
	fake_id = "scsi-lu:naa:600a0b";
	CU_ASSERT_EQUAL(hl_origin_excl_ident(o, old, sizeof(old)), 0);
	CU_ASSERT_STRING_EQUAL(old, "scsi-lu:naa:600a0b");
	CU_ASSERT_TRUE(hl_origin_proof_names("excl:4096:scsi-lu:naa:600a0b", old));
	CU_ASSERT_FALSE(hl_origin_proof_names("excl:4096:scsi-lu:naa:600a0c", old));
	CU_ASSERT_FALSE(hl_origin_proof_names("excl:4096", old));
	CU_ASSERT_FALSE(hl_origin_proof_names("file:1:2:3:4.5", old));
	CU_ASSERT_FALSE(hl_origin_proof_names(NULL, old));
	CU_ASSERT_FALSE(hl_origin_proof_names("excl:4096:", ""));
	fake_lasting = false;
	CU_ASSERT_EQUAL(hl_origin_excl_ident(o, old, sizeof(old)), -EOPNOTSUPP);
	fake_lasting = true;
	fake_id = long_id;
	/* exclusive = yes removed */
	o->sole_writer = false;
	CU_ASSERT_EQUAL(check(o, proof, why), -ESTALE);
	CU_ASSERT_STRING_EQUAL(why, "exclusive = yes was removed");
	fake_id = NULL;
	origin_free(o);
}

static const struct hl_test tests[] = {
    {"alias key: spellings of one iscsi:// LUN", test_iscsi_spellings},
    {"alias key: files, links, rbd, other schemes", test_file_and_others},
    {"VPD 83h: the logical unit's designator", test_lu_designator},
    {"excl: proofs carry a lasting identity", test_excl_identity},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("origin_alias_key", tests);
}
