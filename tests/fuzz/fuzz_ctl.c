// clang-format off
// fuzz-sources: src/daemon/control_edit.c src/conf/conf.c src/conf/conf_check.c src/conf/conf_write.c src/util/util.c src/log/log.c
// fuzz-libs: -ljansson -pthread
// fuzz-args: -max_len=65536
// clang-format on
/*
 * fuzz_ctl.c - libFuzzer harness for the control protocol's request
 * parsing: the control socket's line framing, JSON validation and dispatch
 * (src/ctl/ctl.c: client_read, dispatch) over a real socketpair, and
 * behind them the daemon's parsing of paths and arguments into the edited
 * configuration a set, create or delete asks for (src/daemon/control_edit.c),
 * against a fixed running configuration. Nothing acts: the harness's
 * commands check the edited copy (hl_conf_check, the daemon's own first
 * step) and free it.
 *
 * Input: byte 0 the size of the pieces the bytes arrive in (0: at once),
 * byte 1 how many sessions exist (tsih 1..n, and the target's count), the
 * rest the bytes a client sends; then it shuts down its sending side.
 *
 * Checked: every request line gets exactly one reply line, in order; a
 * reply is a JSON object {"ok":true[,"result":...]} or {"ok":false,
 * "error":"<non-empty>"} (or the {"started":true} notice of a request with
 * a deadline); a path that resolves has a canonical spelling that resolves
 * to the same object; an edit that succeeds hands back a configuration.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/control_edit.h"
#include "hotlun/log.h"

/* The server's framing and dispatch (static) are fuzzed: one unit with it. */
#include "ctl/ctl.c"

/*
 * ctl.c's reactor side: no listener and no epoll here. The harness plays
 * the reactor (serve); what only the listener calls is never reached.
 */
int hl_event_mod(struct hl_event *ev, uint32_t events)
{
	(void)ev;
	(void)events;
	return 0;
}

void hl_event_init(struct hl_event *ev, int fd, hl_event_fn fn, void *arg)
{
	(void)ev, (void)fd, (void)fn, (void)arg;
	abort();
}

int hl_event_add(struct hl_reactor *r, struct hl_event *ev, uint32_t events)
{
	(void)r, (void)ev, (void)events;
	abort();
}

void hl_event_del(struct hl_event *ev)
{
	(void)ev;
	abort();
}

/*
 * A client's idle timer (ctl.c, control_idle_timeout) is started and
 * stopped around each request; no time passes here, so it never fires.
 */
void hl_timer_init(struct hl_timer *t, hl_timer_fn fn, void *arg)
{
	(void)t, (void)fn, (void)arg;
}

void hl_timer_start(struct hl_reactor *r, struct hl_timer *t, uint64_t delay_ms)
{
	(void)r, (void)t, (void)delay_ms;
}

void hl_timer_stop(struct hl_timer *t)
{
	(void)t;
}

static const char conf_text[] = "[global]\n"
                                "portal = 127.0.0.1:3260\n"
                                "portal = [::1]:3260\n"
                                "state_dir = /nonexistent/hotlun-fuzz\n"
                                "control_socket = /nonexistent/hotlun-fuzz/ctl.sock\n"
                                "discovery_chap_user = disc\n"
                                "discovery_chap_secret = discsecret123\n"
                                "[cache ssd0]\n"
                                "device = /nonexistent/ssd0.cache\n"
                                "size = 64M\n"
                                "block_size = 64K\n"
                                "[disk vm]\n"
                                "origin = file:/nonexistent/vm.img\n"
                                "cache = ssd0\n"
                                "[disk plain]\n"
                                "origin = file:/nonexistent/plain.img\n"
                                "origin_iops = 200\n"
                                "[target iqn.2026-11.io.hotlun:fuzz]\n"
                                "lun.0 = vm\n"
                                "lun.3 = plain\n"
                                "allow = iqn.2026-11.io.hotlun:init\n"
                                "chap_user = user\n"
                                "chap_secret = secret123456\n"
                                "[target iqn.2026-11.io.hotlun:open]\n"
                                "lun.0 = plain\n"
                                "allow = ALL\n";

static struct hl_conf *running;
static unsigned nsessions;

static bool view_session_exists(void *arg, const char *tsih)
{
	uint64_t n;

	(void)arg;
	return !hl_parse_u64(tsih, &n) && n >= 1 && n <= nsessions;
}

static unsigned view_target_sessions(void *arg, const char *target)
{
	(void)arg;
	return strcmp(target, "iqn.2026-11.io.hotlun:fuzz") == 0 ? nsessions : 0;
}

/* What get shows of the secrets (the rest of get's output does not matter to set). */
static int view_shown(void *arg, const struct node *nd, json_t **out, char *err, size_t errlen)
{
	const struct ctl_view *v = arg;
	json_t *o = json_object();

	(void)err;
	(void)errlen;
	if (nd->kind == N_TARGET) {
		const struct hl_conf_target *t = hl_conf_find_target(v->conf, nd->name);
		if (t && t->chap_secret)
			json_object_set_new(o, "chap_secret", json_string("********"));
		if (t && t->mutual_secret)
			json_object_set_new(o, "mutual_secret", json_string("********"));
	} else if (nd->kind == N_ROOT && v->conf->discovery_chap_secret) {
		json_object_set_new(o, "discovery_chap_secret", json_string("********"));
	}
	*out = o;
	return 0;
}

static struct ctl_view view = {
    .session_exists = view_session_exists,
    .target_sessions = view_target_sessions,
    .shown = view_shown,
    .arg = &view,
};

static void same_node(const struct node *a, const char *path)
{
	struct node b;
	char err[512];

	if (ctl_parse_path(&view, path, &b, err, sizeof(err))) {
		fprintf(stderr, "canonical path '%s' does not resolve: %s\n", path, err);
		abort();
	}
	if (a->kind != b.kind || strcmp(a->name, b.name) || strcmp(a->leaf, b.leaf)) {
		fprintf(stderr, "canonical path '%s' names another object\n", path);
		abort();
	}
}

/* get: the path resolved, its canonical spelling as the result. */
static int cmd_get(void *ctx, json_t *args, json_t **result, char *err, size_t errlen)
{
	const char *path = ctl_arg_str(args, "path");
	struct node nd;
	char canon[1024];
	int rc;

	(void)ctx;
	if (!path)
		return -EINVAL;
	rc = ctl_parse_path(&view, path, &nd, err, errlen);
	if (rc)
		return rc;
	ctl_node_path(&nd, canon, sizeof(canon));
	same_node(&nd, canon);
	*result = json_pack("{s:s}", "path", canon);
	return 0;
}

/* What control.c does with an edited copy, but for applying it. */
static int settle(int rc, struct hl_conf *next, char *err, size_t errlen)
{
	if (rc) {
		if (next) {
			fprintf(stderr, "an edit failed (%d) and handed back a configuration\n",
			        rc);
			abort();
		}
		return rc;
	}
	if (!next)
		return 0;
	rc = hl_conf_check(next, err, errlen);
	hl_conf_free(next);
	return rc;
}

static int cmd_set(void *ctx, json_t *args, json_t **result, char *err, size_t errlen)
{
	struct hl_conf *next = NULL;

	(void)ctx;
	(void)result;
	return settle(ctl_edit_set(&view, args, &next, err, errlen), next, err, errlen);
}

static int cmd_create(void *ctx, json_t *args, json_t **result, char *err, size_t errlen)
{
	struct hl_conf *next = NULL;
	char created[1024];
	int rc;

	(void)ctx;
	rc = settle(ctl_edit_create(&view, args, &next, created, sizeof(created), err, errlen),
	            next, err, errlen);
	if (rc == 0)
		*result = json_pack("{s:s}", "created", created);
	return rc;
}

static int cmd_delete(void *ctx, json_t *args, json_t **result, char *err, size_t errlen)
{
	struct hl_conf *next = NULL;

	(void)ctx;
	(void)result;
	return settle(ctl_edit_delete(&view, args, &next, err, errlen), next, err, errlen);
}

static const struct hl_ctl_command commands[] = {
    {"get", "the path resolved", cmd_get},
    {"set", "an edit, checked and dropped", cmd_set},
    {"create", "an edit, checked and dropped", cmd_create},
    {"delete", "an edit, checked and dropped", cmd_delete},
    {NULL, NULL, NULL},
};

static void init(void)
{
	char err[512];

	if (running)
		return;
	hl_log_level = HL_LOG_ERR - 1; /* "not run" notices */
	if (hl_conf_parse(conf_text, sizeof(conf_text) - 1, "fuzz.conf", &running, err,
	                  sizeof(err)) ||
	    hl_conf_check(running, err, sizeof(err))) {
		fprintf(stderr, "fuzz_ctl: its configuration: %s\n", err);
		abort();
	}
	view.conf = running;
}

struct replies {
	char *buf;
	size_t len, cap;
};

/* Move what the server sent (socket) into r. */
static void drain(int fd, struct replies *r)
{
	for (;;) {
		if (r->cap - r->len < 4096) {
			r->cap = r->cap ? r->cap * 2 : 16384;
			r->buf = realloc(r->buf, r->cap);
			if (!r->buf)
				abort();
		}
		ssize_t n = recv(fd, r->buf + r->len, r->cap - r->len, MSG_DONTWAIT);
		if (n <= 0)
			return;
		r->len += (size_t)n;
	}
}

/* Let the server read and answer until it waits for more bytes or closes. */
static void serve(struct ctl_client *c, int peer, struct replies *r)
{
	for (int i = 0; i < 1 << 20 && !c->closing; i++) {
		client_read(c);
		bool answered = c->out_len > c->out_off;
		client_flush(c); /* as the reactor does on EPOLLOUT */
		if (c->out_len > c->out_off) {
			fprintf(stderr, "a reply does not fit the socket\n");
			abort();
		}
		drain(peer, r);
		if (!answered)
			return; /* it read everything there was */
	}
}

/* Check the replies against the requests sent. */
static void check(const uint8_t *in, size_t len, const struct replies *r)
{
	size_t want = 0, got = 0;

	for (size_t s = 0; s < len;) {
		const uint8_t *nl = memchr(in + s, '\n', len - s);
		if (!nl)
			break;
		size_t l = (size_t)(nl - (in + s));
		if (l && !(l == 1 && in[s] == '\r'))
			want++;
		s += l + 1;
	}
	for (size_t s = 0; s < r->len;) {
		const char *nl = memchr(r->buf + s, '\n', r->len - s);
		if (!nl) {
			fprintf(stderr, "a reply without its newline\n");
			abort();
		}
		size_t l = (size_t)(nl - (r->buf + s));
		json_error_t je;
		json_t *j = json_loadb(r->buf + s, l, 0, &je);
		if (!json_is_object(j)) {
			fprintf(stderr, "a reply that is not a JSON object: %.*s\n", (int)l,
			        r->buf + s);
			abort();
		}
		json_t *ok = json_object_get(j, "ok");
		if (json_is_true(json_object_get(j, "started")) && json_object_size(j) == 1) {
			/* a deadline's notice: its reply follows */
		} else if (json_is_true(ok)) {
			got++;
		} else if (json_is_false(ok)) {
			const char *e = json_string_value(json_object_get(j, "error"));
			if (!e || !*e) {
				fprintf(stderr, "an error reply without a message: %.*s\n", (int)l,
				        r->buf + s);
				abort();
			}
			got++;
		} else {
			fprintf(stderr, "a reply without ok: %.*s\n", (int)l, r->buf + s);
			abort();
		}
		json_decref(j);
		s += l + 1;
	}
	if (got != want) {
		fprintf(stderr, "%zu request lines, %zu replies\n", want, got);
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct hl_ctl_server srv = {.cmds = commands, .ctx = NULL};
	struct replies r = {0};
	struct ctl_client *c;
	size_t piece;
	int sv[2];

	init();
	if (size < 2)
		return 0;
	piece = data[0] ? data[0] : size;
	nsessions = data[1] % 8;
	data += 2;
	size -= 2;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		abort();
	/* room for the whole input at once: the harness writes before the server reads */
	int sz = 1 << 20;
	setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	c = calloc(1, sizeof(*c));
	if (!c)
		abort();
	c->srv = &srv;
	c->ev.fd = sv[0];
	snprintf(c->who, sizeof(c->who), "pid 1 uid 0");
	for (size_t off = 0; off < size && !c->closing; off += piece) {
		size_t n = HL_MIN(piece, size - off);
		if (send(sv[1], data + off, n, MSG_NOSIGNAL) != (ssize_t)n)
			abort();
		serve(c, sv[1], &r);
	}
	shutdown(sv[1], SHUT_WR); /* the client is done: what is left is answered, then EOF */
	serve(c, sv[1], &r);
	if (!c->closing) {
		fprintf(stderr, "the server did not see the end of the connection\n");
		abort();
	}
	if (getenv("HL_FUZZ_VERBOSE"))
		fprintf(stderr, "%.*s", (int)r.len, r.buf ? r.buf : "");
	check(data, size, &r);
	close(sv[0]);
	close(sv[1]);
	if (c->in)
		explicit_bzero(c->in, c->in_cap);
	free(c->in);
	free(c->out);
	free(c);
	free(r.buf);
	return 0;
}
