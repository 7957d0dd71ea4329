/*
 * text.c - the key=value text format of iSCSI login and text requests
 * (RFC 7143 section 6.1): parsing a received data segment into an ordered
 * list of pairs, and building one to send.
 *
 * The parser works on its own NUL-terminated copy of the segment, so the
 * returned key and value strings are ordinary C strings and no later code
 * can run off the end of the network buffer.
 */
#include "iscsi/iscsi_text.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* RFC 7143 6.1: key names are made of letters, digits, '.', '-', '+', '@' and '_'. */
static bool key_char_ok(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '.' || c == '-' || c == '+' || c == '@' || c == '_';
}

static int kvlist_push(struct iscsi_kvlist *list, char *key, char *value)
{
	if (list->n == list->cap) {
		size_t cap = list->cap ? list->cap * 2 : 16;
		struct iscsi_kv *kv;

		if (cap > SIZE_MAX / sizeof(*kv))
			return -ENOMEM;
		kv = realloc(list->kv, cap * sizeof(*kv));
		if (!kv)
			return -ENOMEM;
		list->kv = kv;
		list->cap = cap;
	}
	list->kv[list->n].key = key;
	list->kv[list->n].value = value;
	list->n++;
	return 0;
}

/*
 * Split one NUL-terminated "key=value" string in place. The '=' becomes
 * the key's terminator, so key and value are both C strings.
 */
static int split_pair(char *pair, size_t pair_len, char **key, char **value)
{
	char *eq = memchr(pair, '=', pair_len);
	size_t key_len;

	if (!eq)
		return -EINVAL;
	key_len = (size_t)(eq - pair);
	if (key_len == 0 || key_len > ISCSI_KEY_MAX)
		return -EINVAL;
	for (size_t i = 0; i < key_len; i++) {
		/* "#" only in the "X#" prefix of public extension keys (RFC 7143 13). */
		if (!key_char_ok((unsigned char)pair[i]) &&
		    !(i == 1 && pair[0] == 'X' && pair[1] == '#'))
			return -EINVAL;
	}
	if (pair_len - key_len - 1 > ISCSI_VALUE_MAX)
		return -EINVAL;
	*eq = '\0';
	*key = pair;
	*value = eq + 1;
	return 0;
}

int iscsi_kvlist_parse(struct iscsi_kvlist *list, const void *data, size_t len)
{
	const char *in = data;
	char *s;
	size_t off = 0;
	int rc;

	memset(list, 0, sizeof(*list));
	if (len == 0)
		return 0;
	if (!data)
		return -EINVAL;
	/* RFC 7143 6.1: every pair, the last one included, ends with a NUL. */
	if (in[len - 1] != '\0')
		return -EINVAL;

	s = malloc(len);
	if (!s)
		return -ENOMEM;
	memcpy(s, data, len);
	list->storage = s;

	while (off < len) {
		/* s[len - 1] == '\0', so strlen stays inside the copy. */
		size_t pair_len = strlen(s + off);
		char *key, *value;

		if (pair_len == 0) {
			off++;
			continue;
		}
		rc = split_pair(s + off, pair_len, &key, &value);
		if (rc == 0)
			rc = kvlist_push(list, key, value);
		if (rc < 0) {
			iscsi_kvlist_free(list);
			return rc;
		}
		off += pair_len + 1;
	}
	return 0;
}

void iscsi_kvlist_free(struct iscsi_kvlist *list)
{
	free(list->kv);
	free(list->storage);
	memset(list, 0, sizeof(*list));
}

const char *iscsi_kvlist_find(const struct iscsi_kvlist *list, const char *key)
{
	for (size_t i = 0; i < list->n; i++) {
		if (strcmp(list->kv[i].key, key) == 0)
			return list->kv[i].value;
	}
	return NULL;
}

static int kv_cmp(const void *a, const void *b)
{
	const struct iscsi_kv *x = *(const struct iscsi_kv *const *)a;
	const struct iscsi_kv *y = *(const struct iscsi_kv *const *)b;
	int c = strcmp(x->key, y->key);

	/* Same key: keep list order (the array is in list order, so pointers compare). */
	if (c == 0)
		c = (x > y) - (x < y);
	return c;
}

int iscsi_kvlist_find_duplicate(const struct iscsi_kvlist *list, const char **dup)
{
	const struct iscsi_kv **sorted, *first = NULL;

	*dup = NULL;
	if (list->n < 2)
		return 0;
	sorted = malloc(list->n * sizeof(*sorted));
	if (!sorted)
		return -ENOMEM;
	for (size_t i = 0; i < list->n; i++)
		sorted[i] = &list->kv[i];
	qsort(sorted, list->n, sizeof(*sorted), kv_cmp);
	for (size_t i = 1; i < list->n; i++) {
		/* sorted[i] repeats a key: it is a second (or later) occurrence. */
		if (strcmp(sorted[i - 1]->key, sorted[i]->key) == 0 &&
		    (!first || sorted[i] < first))
			first = sorted[i];
	}
	free(sorted);
	if (!first)
		return 0;
	*dup = first->key;
	return -EEXIST;
}

/* Make room for `need` more bytes. */
static int textbuf_reserve(struct iscsi_textbuf *tb, size_t need)
{
	size_t cap;
	uint8_t *data;

	if (need > SIZE_MAX - tb->len)
		return -ENOMEM;
	if (tb->len + need <= tb->cap)
		return 0;
	cap = tb->cap ? tb->cap : 512;
	while (cap < tb->len + need) {
		if (cap > SIZE_MAX / 2)
			return -ENOMEM;
		cap *= 2;
	}
	data = realloc(tb->data, cap);
	if (!data)
		return -ENOMEM;
	tb->data = data;
	tb->cap = cap;
	return 0;
}

int iscsi_textbuf_add(struct iscsi_textbuf *tb, const char *key, const char *value)
{
	size_t klen = strlen(key), vlen = strlen(value);
	int rc;

	if (klen > SIZE_MAX - 2 || vlen > SIZE_MAX - 2 - klen)
		return -ENOMEM;
	rc = textbuf_reserve(tb, klen + vlen + 2);
	if (rc < 0)
		return rc;
	memcpy(tb->data + tb->len, key, klen);
	tb->len += klen;
	tb->data[tb->len++] = '=';
	memcpy(tb->data + tb->len, value, vlen);
	tb->len += vlen;
	tb->data[tb->len++] = '\0';
	return 0;
}

int iscsi_textbuf_addf(struct iscsi_textbuf *tb, const char *key, const char *fmt, ...)
{
	char small[64], *value = small;
	va_list ap, ap2;
	int n, rc;

	va_start(ap, fmt);
	va_copy(ap2, ap);
	n = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (n < 0) {
		va_end(ap2);
		return -EINVAL;
	}
	if ((size_t)n >= sizeof(small)) {
		value = malloc((size_t)n + 1);
		if (!value) {
			va_end(ap2);
			return -ENOMEM;
		}
		vsnprintf(value, (size_t)n + 1, fmt, ap2);
	}
	va_end(ap2);
	rc = iscsi_textbuf_add(tb, key, value);
	if (value != small)
		free(value);
	return rc;
}

void iscsi_textbuf_free(struct iscsi_textbuf *tb)
{
	free(tb->data);
	memset(tb, 0, sizeof(*tb));
}
