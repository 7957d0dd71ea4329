/*
 * tests/unit/iscsi/turn_hook_stub.h - the reactor's end-of-turn hooks for a
 * program that links the iSCSI layer without src/event/reactor.c
 * (session_ut, fuzz_pdu): there are no reactor turns, so queueing always
 * refuses and a connection sends at once (with sendmsg: no io_uring for
 * sends either). Include once, in the .c file.
 */
#ifndef HL_TURN_HOOK_STUB_H
#define HL_TURN_HOOK_STUB_H

#include "hotlun/event.h"

int hl_turn_hook_queue(struct hl_reactor *r, struct hl_turn_hook *h)
{
	(void)r;
	(void)h;
	return -EAGAIN;
}

void hl_turn_hook_cancel(struct hl_turn_hook *h)
{
	h->pprev = NULL;
	h->next = NULL;
}

/* one endless turn (conn.c reads it only for send_uring) */
uint64_t hl_reactor_heartbeat(const struct hl_reactor *r)
{
	(void)r;
	return 0;
}

/* conn.c asks for it only when the server's send_uring is on */
int iscsi_tx_uring_send(struct iscsi_conn *c, const struct msghdr *msg)
{
	(void)c;
	(void)msg;
	return -ENOSYS;
}

#endif
