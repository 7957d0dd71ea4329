/*
 * login.c - the login phase of one connection (RFC 7143 section 6): the
 * security and operational stages with CSG/NSG/T/C, request and response
 * continuation, InitiatorName/TargetName/SessionType checks, the ACL,
 * AuthMethod None and CHAP (one-way and mutual), operational negotiation
 * through iscsi_negotiate_key, TSIH assignment and session creation on the
 * move to the full feature phase. Failures answer with a login status
 * class/detail and close the connection once that response is sent.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hotlun/log.h"
#include "iscsi/iscsi_internal.h"

#define CHAP_CHALLENGE_LEN 16

/*
 * CHAP failures and refusals: the guard decides which are logged one by one
 * (iscsi_chap_log); login_fail stays quiet about them, so a guesser at
 * thousands of attempts a second writes a few lines and summaries.
 */
static const char why_throttled[] = "CHAP throttled after repeated failures";
static const char why_chap_wrong[] = "CHAP response does not match";
/* A session cap refused the login: limits.c logs that once per episode. */
static const char why_session_cap[] = "a session cap is reached";

void iscsi_login_free(struct iscsi_login *l)
{
	if (!l)
		return;
	free(l->req);
	iscsi_textbuf_free(&l->rsp);
	/* wipe the challenge and the CHAP secrets (kept from the optimizer) */
	explicit_bzero(l, sizeof(*l));
	free(l);
}

static void login_rsp_header(struct iscsi_conn *c, struct iscsi_bhs *h, uint8_t flags,
                             uint16_t status, uint16_t tsih)
{
	struct iscsi_login *l = c->login;

	memset(h, 0, sizeof(*h));
	h->b[0] = ISCSI_OP_LOGIN_RSP;
	h->b[1] = flags;
	h->b[2] = 0; /* version-max */
	h->b[3] = 0; /* version-active */
	memcpy(&h->b[8], l->isid, 6);
	hl_put_be16(&h->b[14], tsih);
	bhs_set_itt(h, l->itt);
	bhs_put32(h, 24, c->stat_sn++);
	bhs_put32(h, 28, l->cmd_sn);
	bhs_put32(h, 32, l->cmd_sn + ISCSI_QUEUE_DEPTH - 1);
	h->b[36] = (uint8_t)(status >> 8);
	h->b[37] = (uint8_t)status;
}

static int login_fail(struct iscsi_conn *c, uint16_t status, const char *why)
{
	struct iscsi_login *l = c->login;
	struct iscsi_bhs h;
	bool quiet = why == why_throttled || why == why_chap_wrong || why == why_session_cap;

	atomic_fetch_add(&c->srv->st_login_failures, 1);
	/* rate-limited: anyone can fail logins as fast as they can connect */
	HL_LOG_RL(quiet ? HL_LOG_DEBUG : HL_LOG_NOTICE, ISCSI_LOG,
	          "%s: login of '%s' to '%s' failed: 0x%04x (%s)", c->peer_str,
	          l->initiator_name[0] ? l->initiator_name : "?",
	          l->target_name[0] ? l->target_name
	                            : (l->type == ISCSI_SESSION_DISCOVERY ? "discovery" : "?"),
	          status, why);
	login_rsp_header(c, &h, (uint8_t)(l->cur_stage << 2), status, l->tsih);
	c->state = CONN_LOGOUT; /* read nothing more; close once the response is out */
	iscsi_conn_queue(c, &h, NULL, 0, NULL, NULL, true);
	return 0;
}

void iscsi_chap_log(struct hl_iscsi_server *srv)
{
	struct chap_guard_summary s;
	char peer[80];

	if (!chap_guard_log_due(&srv->chap_guard, hl_now_ns(), &s))
		return;
	hl_format_sockaddr(&s.peer, peer, sizeof(peer));
	if (s.ended)
		HL_NOTICE(ISCSI_LOG,
		          "CHAP guessing episode over after %llu s: %llu wrong responses, %llu "
		          "refused unchecked; the last from %s as '%s' to '%s'",
		          (unsigned long long)s.ep_s, (unsigned long long)s.ep_failed,
		          (unsigned long long)s.ep_thr, peer, s.initiator,
		          s.scope[0] ? s.scope : "discovery");
	else
		HL_WARN(ISCSI_LOG,
		        "CHAP: %llu wrong responses and %llu refused unchecked in the last %u s were "
		        "not logged one by one; the latest from %s as '%s' to '%s'",
		        (unsigned long long)s.failed, (unsigned long long)s.throttled, s.period_s, peer,
		        s.initiator, s.scope[0] ? s.scope : "discovery");
}

/* Send one piece of the pending response text. */
static int login_send_piece(struct iscsi_conn *c)
{
	struct iscsi_login *l = c->login;
	size_t left = l->rsp.len - l->rsp_off;
	size_t n = HL_MIN(left, (size_t)ISCSI_LOGIN_DSL);
	bool last = n == left;
	struct iscsi_bhs h;
	uint8_t *piece = NULL;
	uint16_t tsih = l->tsih;

	if (n) {
		piece = malloc(n);
		if (!piece)
			return login_fail(c, ISCSI_LOGIN_OUT_OF_RESOURCES, "no memory");
		memcpy(piece, l->rsp.data + l->rsp_off, n);
	}
	l->rsp_off += n;
	if (last && l->rsp_ffp)
		tsih = c->sess->tsih;
	login_rsp_header(
	    c, &h, last ? l->rsp_flags : (uint8_t)((l->rsp_flags & 0x0c) | ISCSI_LOGIN_CONTINUE),
	    ISCSI_LOGIN_OK, tsih);
	if (iscsi_conn_queue(c, &h, piece, (uint32_t)n, NULL, piece, false) < 0)
		return -ENOMEM;
	if (!last)
		return 0;
	iscsi_textbuf_free(&l->rsp);
	l->rsp_off = 0;
	if (l->rsp_ffp) {
		struct iscsi_session *s = c->sess;
		atomic_fetch_add(&c->srv->st_logins, 1);
		HL_NOTICE(ISCSI_LOG, "%s: %s session %s -> %s tsih 0x%04x established", c->peer_str,
		          s->type == ISCSI_SESSION_DISCOVERY ? "discovery" : "normal",
		          s->initiator_name, s->target ? s->target->name : "-", s->tsih);
		HL_INFO(ISCSI_LOG,
		        "%s: digests header %s data %s, MaxRecvDSL in %u out %u, burst %u/%u, "
		        "InitialR2T %s ImmediateData %s MaxOutstandingR2T %u",
		        c->peer_str, c->params.header_digest ? "CRC32C" : "None",
		        c->params.data_digest ? "CRC32C" : "None", c->params.max_recv_dsl_target,
		        c->params.max_recv_dsl_initiator, c->params.first_burst_length,
		        c->params.max_burst_length, c->params.initial_r2t ? "Yes" : "No",
		        c->params.immediate_data ? "Yes" : "No", c->params.max_outstanding_r2t);
		iscsi_conn_name_session(c);
		c->state = CONN_FFP;
		c->login = NULL;
		iscsi_login_free(l);
		iscsi_conn_params_applied(c);
	}
	return 0;
}

static bool list_has(const char *list, const char *item)
{
	size_t n = strlen(item);

	for (const char *p = list; *p;) {
		const char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		if (len == n && strncmp(p, item, n) == 0)
			return true;
		if (!e)
			break;
		p = e + 1;
	}
	return false;
}

static const struct hl_iscsi_chap *login_chap(struct iscsi_conn *c)
{
	struct iscsi_login *l = c->login;

	if (l->type == ISCSI_SESSION_DISCOVERY) {
		/* One copy for the whole login: the credentials may change meanwhile. */
		if (!l->disc_chap_taken) {
			pthread_mutex_lock(&c->srv->lock);
			l->chap = c->srv->discovery_chap;
			pthread_mutex_unlock(&c->srv->lock);
			l->disc_chap_taken = true;
		}
		return &l->chap;
	}
	return l->target ? &l->chap : NULL; /* copied with the target */
}

static bool ct_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
	uint8_t d = 0;

	for (size_t i = 0; i < n; i++)
		d |= a[i] ^ b[i];
	return d == 0;
}

/*
 * iSCSI names (RFC 3722) are printable and have no spaces; anything else is
 * refused before it reaches a log line or a comparison.
 */
static bool name_ok(const char *n)
{
	for (const unsigned char *p = (const unsigned char *)n; *p; p++)
		if (*p < 0x21 || *p > 0x7e)
			return false;
	return true;
}

/* First PDU: names, session type, target lookup, ACL, TSIH checks. */
static int login_identify(struct iscsi_conn *c, const struct iscsi_kvlist *kv, const char **why)
{
	struct iscsi_login *l = c->login;
	const char *iname = NULL, *tname = NULL, *stype = NULL;

	for (size_t i = 0; i < kv->n; i++) {
		if (strcmp(kv->kv[i].key, "InitiatorName") == 0)
			iname = kv->kv[i].value;
		else if (strcmp(kv->kv[i].key, "TargetName") == 0)
			tname = kv->kv[i].value;
		else if (strcmp(kv->kv[i].key, "SessionType") == 0)
			stype = kv->kv[i].value;
	}
	if (!iname || !iname[0]) {
		*why = "no InitiatorName";
		return ISCSI_LOGIN_MISSING_PARAMETER;
	}
	if (strlen(iname) > HL_ISCSI_NAME_MAX || !name_ok(iname)) {
		*why = "InitiatorName too long or not printable";
		return ISCSI_LOGIN_INITIATOR_ERROR;
	}
	if (tname && (strlen(tname) > HL_ISCSI_NAME_MAX || !name_ok(tname))) {
		*why = "TargetName too long or not printable";
		return ISCSI_LOGIN_INITIATOR_ERROR;
	}
	hl_strlcpy(l->initiator_name, iname, sizeof(l->initiator_name));
	if (tname)
		hl_strlcpy(l->target_name, tname, sizeof(l->target_name));
	l->type = ISCSI_SESSION_NORMAL;
	if (stype) {
		if (strcmp(stype, "Discovery") == 0) {
			l->type = ISCSI_SESSION_DISCOVERY;
		} else if (strcmp(stype, "Normal") != 0) {
			*why = "bad SessionType";
			return ISCSI_LOGIN_SESSION_TYPE_UNSUPPORTED;
		}
	}
	if (l->type == ISCSI_SESSION_NORMAL) {
		if (!tname || !tname[0]) {
			*why = "no TargetName";
			return ISCSI_LOGIN_MISSING_PARAMETER;
		}
		l->target = iscsi_target_find_login(c->srv, tname, &l->chap, &l->mutual);
		if (!l->target) {
			*why = "no such target";
			return ISCSI_LOGIN_NOT_FOUND;
		}
		if (!iscsi_target_allows(l->target, l->initiator_name)) {
			*why = "initiator not in the ACL";
			return ISCSI_LOGIN_NOT_AUTHORIZED;
		}
	}
	if (l->tsih != 0) {
		/*
		 * A live session: only its own connection may be reinstated (same
		 * CID); MaxConnections is 1. No such session: 0x020a, and the
		 * initiator falls back to a new session (TSIH 0).
		 */
		int rc = l->type == ISCSI_SESSION_NORMAL
		             ? iscsi_session_check_tsih(c->srv, l->tsih, l->initiator_name, l->isid,
		                                        l->target, l->cid)
		             : -ENOENT;
		if (rc == -EBUSY) {
			*why =
			    "TSIH of a live session with another CID (one connection per session)";
			return ISCSI_LOGIN_TOO_MANY_CONNECTIONS;
		}
		if (rc < 0) {
			*why = "TSIH of no live session";
			return ISCSI_LOGIN_SESSION_DOES_NOT_EXIST;
		}
	}
	const struct hl_iscsi_chap *chap = login_chap(c);
	l->auth_required = chap && chap->user[0];
	return 0;
}

/* Security keys: AuthMethod and CHAP. @return login status or 0. */
static int login_security_key(struct iscsi_conn *c, const char *key, const char *value,
                              struct iscsi_textbuf *tb, const char **why)
{
	struct iscsi_login *l = c->login;
	const struct hl_iscsi_chap *chap = login_chap(c);

	if (strcmp(key, "AuthMethod") == 0) {
		if (l->auth != AUTH_START) {
			*why = "AuthMethod renegotiated";
			return ISCSI_LOGIN_INITIATOR_ERROR;
		}
		if (l->auth_required) {
			if (!list_has(value, "CHAP")) {
				iscsi_textbuf_add(tb, "AuthMethod", "Reject");
				*why = "CHAP required, not offered";
				return ISCSI_LOGIN_AUTH_FAILED;
			}
			l->auth_chap = true;
			l->auth = AUTH_CHAP_WAIT_A;
			return iscsi_textbuf_add(tb, "AuthMethod", "CHAP") < 0
			           ? ISCSI_LOGIN_OUT_OF_RESOURCES
			           : 0;
		}
		if (list_has(value, "None")) {
			l->auth = AUTH_DONE;
			return iscsi_textbuf_add(tb, "AuthMethod", "None") < 0
			           ? ISCSI_LOGIN_OUT_OF_RESOURCES
			           : 0;
		}
		iscsi_textbuf_add(tb, "AuthMethod", "Reject");
		*why = "no acceptable AuthMethod";
		return ISCSI_LOGIN_AUTH_FAILED;
	}
	if (strcmp(key, "CHAP_A") == 0) {
		if (l->auth != AUTH_CHAP_WAIT_A) {
			*why = "CHAP_A out of sequence";
			return ISCSI_LOGIN_INITIATOR_ERROR;
		}
		int alg = iscsi_chap_select_alg(value);
		if (alg < 0) {
			iscsi_textbuf_add(tb, "CHAP_A", "Reject");
			*why = "no supported CHAP algorithm";
			return ISCSI_LOGIN_AUTH_FAILED;
		}
		uint8_t id;
		char hex[2 * sizeof(l->chap_c) + 3];
		l->chap_alg = alg;
		l->chap_c_len = CHAP_CHALLENGE_LEN;
		if (iscsi_random_bytes(&id, 1) < 0 ||
		    iscsi_random_bytes(l->chap_c, l->chap_c_len) < 0 ||
		    iscsi_chap_encode_hex(l->chap_c, l->chap_c_len, hex, sizeof(hex)) < 0) {
			*why = "no random bytes";
			return ISCSI_LOGIN_TARGET_ERROR;
		}
		l->chap_id = id;
		if (iscsi_textbuf_addf(tb, "CHAP_A", "%d", alg) < 0 ||
		    iscsi_textbuf_addf(tb, "CHAP_I", "%u", id) < 0 ||
		    iscsi_textbuf_add(tb, "CHAP_C", hex) < 0)
			return ISCSI_LOGIN_OUT_OF_RESOURCES;
		l->auth = AUTH_CHAP_WAIT_R;
		return 0;
	}
	if (strncmp(key, "CHAP_", 5) == 0) {
		if (l->auth != AUTH_CHAP_WAIT_R || !chap) {
			*why = "CHAP key out of sequence";
			return ISCSI_LOGIN_INITIATOR_ERROR;
		}
		return 0; /* CHAP_N/R/I/C are checked together in login_chap_verify */
	}
	return -1; /* not a security key */
}

static const char *kv_get(const struct iscsi_kvlist *kv, const char *key)
{
	for (size_t i = 0; i < kv->n; i++)
		if (strcmp(kv->kv[i].key, key) == 0)
			return kv->kv[i].value;
	return NULL;
}

/* The initiator's CHAP_N/CHAP_R (and for mutual CHAP_I/CHAP_C). */
static int login_chap_verify(struct iscsi_conn *c, const struct iscsi_kvlist *kv,
                             struct iscsi_textbuf *tb, const char **why)
{
	struct iscsi_login *l = c->login;
	const struct hl_iscsi_chap *chap = login_chap(c);
	const char *n = kv_get(kv, "CHAP_N"), *r = kv_get(kv, "CHAP_R");
	const char *mi = kv_get(kv, "CHAP_I"), *mc = kv_get(kv, "CHAP_C");
	size_t dlen = iscsi_chap_digest_len((enum iscsi_chap_alg)l->chap_alg);
	uint8_t want[ISCSI_CHAP_DIGEST_MAX], got[ISCSI_CHAP_BIN_MAX];

	if (!n && !r && !mi && !mc)
		return 0; /* nothing yet (the initiator may send them in a later PDU) */
	if (!n || !r) {
		*why = "CHAP_N or CHAP_R missing";
		return ISCSI_LOGIN_AUTH_FAILED;
	}
	/* Online guessing: in a back-off, refused without a verdict (chap_guard.c). */
	const char *to = l->type == ISCSI_SESSION_NORMAL && l->target ? l->target->name : "";
	char scope[HL_ISCSI_NAME_MAX + 1]; /* one budget per secret, whichever target checks it */
	iscsi_chap_scope(c->srv, chap->secret, to, scope, sizeof(scope));
	struct chap_guard *guard = &c->srv->chap_guard;
	struct chap_guard_verdict gv;
	if (!chap_guard_allow(guard, scope, l->initiator_name, &c->peer, hl_now_ns(), &gv)) {
		if (gv.log)
			HL_WARN(ISCSI_LOG,
			        "%s: CHAP response of '%s' refused unchecked: %u wrong in a row %s; "
			        "%llu ms of back-off left",
			        c->peer_str, l->initiator_name, gv.failures,
			        gv.known ? "from this host" : "from hosts not known to this secret",
			        (unsigned long long)gv.wait_ms);
		iscsi_chap_log(c->srv);
		*why = why_throttled;
		return ISCSI_LOGIN_AUTH_FAILED;
	}
	int glen = iscsi_chap_decode(r, got, sizeof(got));
	if (strcmp(n, chap->user) != 0 || glen != (int)dlen ||
	    iscsi_chap_compute((enum iscsi_chap_alg)l->chap_alg, l->chap_id, chap->secret,
	                       l->chap_c, l->chap_c_len, want) < 0 ||
	    !ct_equal(want, got, dlen)) {
		chap_guard_failed(guard, scope, l->initiator_name, &c->peer, hl_now_ns(), &gv);
		if (gv.log) {
			char next[80] = "";
			if (gv.wait_ms)
				snprintf(next, sizeof(next),
				         ": the next %llu ms of %s CHAP responses are refused",
				         (unsigned long long)gv.wait_ms, gv.known ? "its" : "their");
			/* a warning when it opens a back-off: someone may be guessing */
			HL_LOG(gv.wait_ms ? HL_LOG_WARN : HL_LOG_NOTICE, ISCSI_LOG,
			       "%s: CHAP of '%s' to '%s' failed (%u in a row %s)%s", c->peer_str, l->initiator_name, to[0] ? to : "discovery",
			        gv.failures,
			        gv.known ? "from this host, which logged in before"
			                 : "from hosts not known to this secret",
			        next);
		}
		iscsi_chap_log(c->srv);
		*why = why_chap_wrong;
		return ISCSI_LOGIN_AUTH_FAILED;
	}
	/* the secret is known to this host: its own budget from now on, whatever follows */
	chap_guard_passed(guard, scope, l->initiator_name, &c->peer, hl_now_ns());
	if (mi || mc) {
		const struct hl_iscsi_chap *mutual =
		    l->type == ISCSI_SESSION_NORMAL && l->target ? &l->mutual : NULL;
		uint8_t ch[ISCSI_CHAP_BIN_MAX];
		char *end = NULL;
		if (!mi || !mc) {
			*why = "mutual CHAP needs both CHAP_I and CHAP_C";
			return ISCSI_LOGIN_AUTH_FAILED;
		}
		if (!mutual || !mutual->user[0]) {
			*why = "mutual CHAP requested but not configured";
			return ISCSI_LOGIN_AUTH_FAILED;
		}
		unsigned long id = strtoul(mi, &end, 0);
		int clen = iscsi_chap_decode(mc, ch, sizeof(ch));
		if (!*mi || *end || id > 255 || clen <= 0) {
			*why = "malformed CHAP_I/CHAP_C";
			return ISCSI_LOGIN_AUTH_FAILED;
		}
		if ((size_t)clen == l->chap_c_len && memcmp(ch, l->chap_c, l->chap_c_len) == 0) {
			*why = "reflected CHAP challenge";
			return ISCSI_LOGIN_AUTH_FAILED;
		}
		char hex[2 * ISCSI_CHAP_DIGEST_MAX + 3];
		if (iscsi_chap_compute((enum iscsi_chap_alg)l->chap_alg, (uint8_t)id,
		                       mutual->secret, ch, (size_t)clen, want) < 0 ||
		    iscsi_chap_encode_hex(want, dlen, hex, sizeof(hex)) < 0) {
			*why = "CHAP computation failed";
			return ISCSI_LOGIN_TARGET_ERROR;
		}
		if (iscsi_textbuf_add(tb, "CHAP_N", mutual->user) < 0 ||
		    iscsi_textbuf_add(tb, "CHAP_R", hex) < 0)
			return ISCSI_LOGIN_OUT_OF_RESOURCES;
	}
	l->auth = AUTH_DONE;
	return 0;
}

/* Create and register the session; the final response carries its TSIH. */
static int login_make_session(struct iscsi_conn *c, const char **why)
{
	struct iscsi_login *l = c->login;
	struct iscsi_session *s = calloc(1, sizeof(*s));

	if (!s) {
		*why = "no memory";
		return ISCSI_LOGIN_OUT_OF_RESOURCES;
	}
	hl_list_init(&s->link);
	hl_list_init(&s->linger_link);
	hl_list_init(&s->it_link);
	s->type = l->type;
	s->target = l->target;
	hl_strlcpy(s->initiator_name, l->initiator_name, sizeof(s->initiator_name));
	memcpy(s->isid, l->isid, 6);
	s->tpgt = c->tpgt;
	s->cid = l->cid;
	s->exp_cmd_sn = l->cmd_sn;
	s->conn = c;
	s->reactor = c->reactor;
	s->nexus.id = iscsi_nexus_id_next();
	snprintf(s->nexus.initiator_port, sizeof(s->nexus.initiator_port),
	         "%s,i,0x%02x%02x%02x%02x%02x%02x", s->initiator_name, s->isid[0], s->isid[1],
	         s->isid[2], s->isid[3], s->isid[4], s->isid[5]);
	s->nexus.initiator_name = s->initiator_name;
	if (s->target)
		snprintf(s->port_name, sizeof(s->port_name), "%s,t,0x%04x", s->target->name,
		         s->tpgt);
	s->port.name = s->port_name;
	/* the numbering REPORT TARGET PORT GROUPS uses for this gateway's peers too */
	hl_scsi_port_ids(c->srv->gateway, s->tpgt, &s->port.rel_port_id, &s->port.tpg_id);
	s->nexus.port = &s->port;
	const char *cap = NULL;
	int rc = iscsi_session_register(c->srv, s, l->tsih, &cap);
	if (rc < 0) {
		free(s);
		if (rc == -EUSERS) {
			/* the server logs the episode once; each refusal at debug level */
			*why = why_session_cap;
			HL_DEBUG(ISCSI_LOG, "%s: login refused: %s reached", c->peer_str, cap);
			return ISCSI_LOGIN_OUT_OF_RESOURCES;
		}
		if (rc == -ENOENT && l->tsih) {
			*why = "the session went away during login";
			return ISCSI_LOGIN_SESSION_DOES_NOT_EXIST;
		}
		if (rc == -EBUSY && l->tsih) {
			*why = "TSIH of a live session with another CID";
			return ISCSI_LOGIN_TOO_MANY_CONNECTIONS;
		}
		*why = rc == -ESHUTDOWN ? "server stopping" : "no TSIH available";
		return ISCSI_LOGIN_SERVICE_UNAVAILABLE;
	}
	c->sess = s;
	return 0;
}

void iscsi_login_fenced(struct iscsi_conn *c, bool missed)
{
	hl_timer_stop(&c->fence_timer);
	if (c->state != CONN_LOGIN || !c->login)
		return;
	if (missed) {
		login_fail(c, ISCSI_LOGIN_SERVICE_UNAVAILABLE,
		           "no memory to wait for the commands of the session it replaces");
		return;
	}
	if (login_send_piece(c) < 0)
		iscsi_conn_close(c, "no memory");
}

/*
 * The replaced session's commands are still in the LU after
 * ISCSI_FENCE_TIMEOUT_S (a stuck origin): succeeding now would let them
 * land under the new session, so the login fails and the initiator tries
 * again later (its retry waits for them again).
 */
void iscsi_login_fence_timeout(struct hl_timer *tm)
{
	struct iscsi_conn *c = tm->arg;

	iscsi_conn_enter(c);
	if (c->fence && c->state == CONN_LOGIN) {
		iscsi_login_fence_cancel(c);
		HL_WARN(ISCSI_LOG,
		        "%s: commands of the session this login replaces still run after %u s: "
		        "login refused (service unavailable), the initiator will retry",
		        c->peer_str, ISCSI_FENCE_TIMEOUT_S);
		login_fail(c, ISCSI_LOGIN_SERVICE_UNAVAILABLE,
		           "the replaced session's commands are still running");
	}
	iscsi_conn_leave(c);
}

int iscsi_login_handle(struct iscsi_conn *c, struct iscsi_rx *rx)
{
	const struct iscsi_bhs *req = &rx->bhs;
	struct iscsi_login *l = c->login;
	uint8_t flags = bhs_flags(req);
	bool transit = flags & ISCSI_LOGIN_TRANSIT, cont = flags & ISCSI_LOGIN_CONTINUE;
	int csg = (flags >> 2) & 3, nsg = flags & 3;
	const char *why = "";
	int status = 0;

	if (!l) {
		l = c->login = calloc(1, sizeof(*l));
		if (!l)
			return -ENOMEM;
	}
	if (c->fence) /* its last request is answered only when the fence is done */
		return login_fail(c, ISCSI_LOGIN_INITIATOR_ERROR,
		                  "login request before the last one was answered");
	if (!l->first_seen) {
		l->first_seen = true;
		memcpy(l->isid, &req->b[8], 6);
		l->tsih = hl_get_be16(&req->b[14]);
		l->cid = hl_get_be16(&req->b[20]);
		l->cmd_sn = bhs_cmdsn(req);
		l->itt = bhs_itt(req);
		l->cur_stage = csg;
		c->cid = l->cid;
		c->stat_sn = bhs_expstatsn(req);
		if (req->b[3] > 0) /* version-min above what we speak (0) */
			return login_fail(c, ISCSI_LOGIN_UNSUPPORTED_VERSION, "version");
	} else if (memcmp(l->isid, &req->b[8], 6) != 0 || l->tsih != hl_get_be16(&req->b[14])) {
		return login_fail(c, ISCSI_LOGIN_INITIATOR_ERROR, "ISID/TSIH changed during login");
	}
	l->itt = bhs_itt(req);
	c->exp_stat_sn = bhs_expstatsn(req);

	/* A response that did not fit: the initiator asks for the rest with empty requests. */
	if (l->rsp.len && l->rsp_off < l->rsp.len) {
		if (rx->dsl || cont)
			return login_fail(c, ISCSI_LOGIN_INITIATOR_ERROR,
			                  "data while a response continues");
		return login_send_piece(c);
	}

	if (rx->dsl) {
		if (l->req_len + rx->dsl > 64 * 1024)
			return login_fail(c, ISCSI_LOGIN_INITIATOR_ERROR, "login text too long");
		uint8_t *nr = realloc(l->req, l->req_len + rx->dsl);
		if (!nr)
			return login_fail(c, ISCSI_LOGIN_OUT_OF_RESOURCES, "no memory");
		memcpy(nr + l->req_len, rx->data, rx->dsl);
		l->req = nr;
		l->req_len += rx->dsl;
	}
	if (cont) {
		struct iscsi_bhs h;
		if (transit)
			return login_fail(c, ISCSI_LOGIN_INITIATOR_ERROR, "T and C both set");
		login_rsp_header(c, &h, (uint8_t)(csg << 2), ISCSI_LOGIN_OK, 0);
		return iscsi_conn_queue(c, &h, NULL, 0, NULL, NULL, false);
	}

	if (csg != l->cur_stage || csg == 2 || csg == ISCSI_STAGE_FFP)
		return login_fail(c, ISCSI_LOGIN_INITIATOR_ERROR, "bad CSG");
	if (l->tpgt_sent && csg == ISCSI_STAGE_OPERATIONAL && l->auth_required &&
	    l->auth != AUTH_DONE)
		return login_fail(c, ISCSI_LOGIN_AUTH_FAILED, "authentication required");
	if (transit && (nsg == 2 || nsg <= csg))
		return login_fail(c, ISCSI_LOGIN_INITIATOR_ERROR, "bad NSG");

	struct iscsi_kvlist kv = {0};
	if (l->req_len && iscsi_kvlist_parse(&kv, l->req, l->req_len) < 0) {
		free(l->req);
		l->req = NULL;
		l->req_len = 0;
		return login_fail(c, ISCSI_LOGIN_INITIATOR_ERROR, "malformed text");
	}
	free(l->req);
	l->req = NULL;
	l->req_len = 0;

	struct iscsi_textbuf tb = {0};
	bool first_rsp = !l->tpgt_sent;

	/* RFC 7143 6.1: a key may appear only once in one negotiation step (O(n log n)) */
	const char *dup = NULL;
	int drc = iscsi_kvlist_find_duplicate(&kv, &dup);
	if (drc == -EEXIST) {
		status = ISCSI_LOGIN_INITIATOR_ERROR;
		why = "key sent twice";
		goto fail;
	} else if (drc < 0) {
		goto nomem;
	}

	if (first_rsp) {
		status = login_identify(c, &kv, &why);
		if (status)
			goto fail;
		if (l->type == ISCSI_SESSION_NORMAL &&
		    iscsi_textbuf_addf(&tb, "TargetPortalGroupTag", "%u", c->tpgt) < 0)
			goto nomem;
		l->tpgt_sent = true;
		if (csg != ISCSI_STAGE_SECURITY) {
			/* the initiator skipped the security stage */
			if (l->auth_required) {
				status = ISCSI_LOGIN_AUTH_FAILED;
				why = "authentication required, security stage skipped";
				goto fail;
			}
			l->auth = AUTH_DONE;
		}
	}

	for (size_t i = 0; i < kv.n; i++) {
		const char *key = kv.kv[i].key, *value = kv.kv[i].value;
		char answer[256];

		if (strcmp(key, "InitiatorName") == 0 || strcmp(key, "TargetName") == 0 ||
		    strcmp(key, "SessionType") == 0) {
			if (!first_rsp) {
				/* may be repeated; must not change */
				const char *was =
				    key[0] == 'I' ? l->initiator_name
				    : key[0] == 'T'
				        ? l->target_name
				        : (l->type == ISCSI_SESSION_DISCOVERY ? "Discovery"
				                                              : "Normal");
				if (strcmp(was, value) != 0) {
					status = ISCSI_LOGIN_INITIATOR_ERROR;
					why = "name changed during login";
					goto fail;
				}
			}
			continue;
		}
		if (strcmp(key, "InitiatorAlias") == 0)
			continue;
		if (strcmp(key, "AuthMethod") == 0 || strncmp(key, "CHAP_", 5) == 0) {
			if (csg != ISCSI_STAGE_SECURITY) {
				status = ISCSI_LOGIN_INITIATOR_ERROR;
				why = "security key outside the security stage";
				goto fail;
			}
			status = login_security_key(c, key, value, &tb, &why);
			if (status > 0)
				goto fail;
			status = 0;
			continue;
		}
		enum iscsi_neg_result nr = iscsi_negotiate_key(&c->params, &c->lim, l->type, key,
		                                               value, answer, sizeof(answer));
		switch (nr) {
		case ISCSI_NEG_ANSWER:
			if (iscsi_textbuf_add(&tb, key, answer) < 0)
				goto nomem;
			break;
		case ISCSI_NEG_NO_ANSWER:
			break;
		case ISCSI_NEG_NOT_HANDLED:
			/* TargetAlias, TargetAddress... are target-declared: not the initiator's to
			 * send */
			if (iscsi_textbuf_add(&tb, key, "Irrelevant") < 0)
				goto nomem;
			break;
		case ISCSI_NEG_PROTOCOL_ERROR:
			status = ISCSI_LOGIN_INITIATOR_ERROR;
			why = "bad operational key value";
			goto fail;
		}
	}

	if (csg == ISCSI_STAGE_SECURITY && l->auth == AUTH_CHAP_WAIT_R && l->chap_c_len &&
	    kv_get(&kv, "CHAP_A") == NULL) {
		status = login_chap_verify(c, &kv, &tb, &why);
		if (status)
			goto fail;
	}

	/* Decide whether we move on. */
	bool go = transit;
	if (csg == ISCSI_STAGE_SECURITY && transit && l->auth != AUTH_DONE) {
		if (l->auth == AUTH_START && l->auth_required) {
			status = ISCSI_LOGIN_AUTH_FAILED;
			why = "authentication required";
			goto fail;
		}
		if (l->auth == AUTH_START) {
			l->auth = AUTH_DONE; /* no AuthMethod offered and none needed */
		} else {
			go = false; /* CHAP still running: stay in the security stage */
		}
	}
	if (csg == ISCSI_STAGE_OPERATIONAL || (go && nsg == ISCSI_STAGE_OPERATIONAL) ||
	    (go && nsg == ISCSI_STAGE_FFP)) {
		if (csg == ISCSI_STAGE_OPERATIONAL || nsg == ISCSI_STAGE_FFP) {
			unsigned before = l->decl_mask;
			if (iscsi_params_add_target_declarations(&tb, &c->lim, &l->decl_mask) < 0)
				goto nomem;
			if (before != l->decl_mask)
				c->params.max_recv_dsl_target = c->lim.max_recv_dsl;
		}
	}
	uint8_t rflags = (uint8_t)(csg << 2);
	if (go) {
		rflags |= ISCSI_LOGIN_TRANSIT | (uint8_t)nsg;
		l->cur_stage = nsg;
	}
	l->rsp_ffp = false;
	if (go && nsg == ISCSI_STAGE_FFP) {
		iscsi_params_finish(&c->params);
		if (l->type == ISCSI_SESSION_NORMAL && l->target && l->target->alias[0] &&
		    iscsi_textbuf_add(&tb, "TargetAlias", l->target->alias) < 0)
			goto nomem;
		status = login_make_session(c, &why);
		if (status)
			goto fail;
		l->rsp_ffp = true;
	}
	iscsi_kvlist_free(&kv);
	l->rsp = tb;
	l->rsp_off = 0;
	l->rsp_flags = rflags;
	if (l->rsp_ffp && l->type == ISCSI_SESSION_NORMAL && c->sess->fence_needed) {
		/* answered once the sessions it replaces have no command left (tmf.c) */
		if (iscsi_login_fence_start(c) < 0)
			return login_fail(c, ISCSI_LOGIN_OUT_OF_RESOURCES, "no memory");
		if (c->reactor)
			hl_timer_start(c->reactor, &c->fence_timer,
			               ISCSI_FENCE_TIMEOUT_S * 1000ull);
		return 0;
	}
	return login_send_piece(c);

nomem:
	status = ISCSI_LOGIN_OUT_OF_RESOURCES;
	why = "no memory";
fail:
	iscsi_kvlist_free(&kv);
	iscsi_textbuf_free(&tb);
	return login_fail(c, (uint16_t)status, why);
}
