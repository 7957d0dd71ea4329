/*
 * cli_shell.c - hotlunctl's interactive shell (libedit): the prompt loop,
 * tab completion of commands, paths (asked of hotlund) and parameter names,
 * and the history, kept with every secret masked and readable only by its
 * owner.
 */
#include "config.h"

#include "cli/cli_internal.h"
#include "hotlun/util.h"

#include <editline/readline.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- completion ---- */

static char **completion_words;
static size_t n_completion_words;

static void completion_reset(void)
{
	for (size_t i = 0; i < n_completion_words; i++)
		free(completion_words[i]);
	free(completion_words);
	completion_words = NULL;
	n_completion_words = 0;
}

static void completion_add(const char *w)
{
	char **v = realloc(completion_words, (n_completion_words + 1) * sizeof(*v));
	if (!v)
		return;
	completion_words = v;
	completion_words[n_completion_words] = strdup(w);
	if (completion_words[n_completion_words])
		n_completion_words++;
}

static char *completion_gen(const char *text, int state)
{
	static size_t i;
	if (state == 0)
		i = 0;
	while (i < n_completion_words) {
		const char *w = completion_words[i++];
		if (strncmp(w, text, strlen(text)) == 0)
			return strdup(w);
	}
	return NULL;
}

/* Candidate paths for text: children of its folder part. */
static void complete_paths(const char *text)
{
	char dir[1024], base[1024];
	const char *slash = strrchr(text, '/');

	if (slash) {
		size_t dl = (size_t)(slash - text);
		char part[1024];
		snprintf(part, sizeof(part), "%.*s", (int)dl, text);
		cli_resolve(dl ? part : "/", dir, sizeof(dir));
		snprintf(base, sizeof(base), "%.*s", (int)(dl + 1), text);
	} else {
		cli_resolve(".", dir, sizeof(dir));
		base[0] = '\0';
	}
	json_t *r = cli_request("ls", json_pack("{s:s}", "path", dir));
	if (!r)
		return;
	size_t i;
	json_t *child;
	json_array_foreach(json_object_get(r, "children"), i, child)
	{
		char w[1100];
		snprintf(w, sizeof(w), "%s%s/", base,
		         json_string_value(json_object_get(child, "name")));
		completion_add(w);
	}
	json_decref(r);
}

static char **complete(const char *text, int start, int end)
{
	char line[1024];
	char *words[32];
	(void)end;

	completion_reset();
	rl_attempted_completion_over = 1;
	snprintf(line, sizeof(line), "%.*s", start, rl_line_buffer);
	int n = cli_split_words(line, words, 32);
	bool first_is_path = n > 0 && (words[0][0] == '/' || words[0][0] == '.');
	int cmd_pos = first_is_path ? 1 : 0;

	if (n == cmd_pos) {
		for (const struct cli_command *c = cli_commands; c->name; c++)
			completion_add(c->name);
		if (n == 0)
			complete_paths(text);
	} else {
		const char *cmd = words[cmd_pos];
		char path[1024];
		if (first_is_path)
			cli_resolve(words[0], path, sizeof(path));
		else
			hl_strlcpy(path, cli_cwd(), sizeof(path));
		if (strcmp(cmd, "cd") == 0 || strcmp(cmd, "ls") == 0 ||
		    strcmp(cmd, "delete") == 0) {
			complete_paths(text);
		} else if (strcmp(cmd, "set") == 0 || strcmp(cmd, "create") == 0 ||
		           strcmp(cmd, "get") == 0) {
			const char *const *p = cli_params_for(path);
			for (; p && *p; p++)
				completion_add(*p);
			if (strcmp(cmd, "create") == 0 && strstr(path, "/luns"))
				complete_paths(text);
		}
	}
	rl_completion_append_character = '\0';
	return rl_completion_matches(text, completion_gen);
}

/*
 * line as the history keeps it: the value of each secret KEY=VALUE word
 * masked as get shows it ("********", which set takes back as "unchanged"),
 * an origin URL's credentials as "user%***@"; KEY=- and KEY=@FILE hold no
 * secret and stay. Words are split as cli_split_words does (quotes kept).
 */
static void history_line(const char *line, char *out, size_t len)
{
	size_t o = 0;
	const char *p = line;

	out[0] = '\0';
	while (*p && o + 1 < len) {
		if (*p == ' ' || *p == '\t') {
			out[o++] = *p++;
			continue;
		}
		const char *w = p;
		bool quoted = false;
		for (; *p && (quoted || (*p != ' ' && *p != '\t')); p++)
			quoted ^= *p == '"';
		size_t wl = (size_t)(p - w);
		const char *eq = memchr(w, '=', wl);
		char val[1100], shown[2200];
		const char *put = NULL;
		size_t put_len = wl;
		if (eq && !memchr(w, '"', (size_t)(eq - w))) {
			/* the value without its quotes, as cli_split_words would give it */
			size_t vl = 0;
			for (const char *q = eq + 1; q < p && vl + 1 < sizeof(val); q++)
				if (*q != '"')
					val[vl++] = *q;
			val[vl] = '\0';
			if (cli_secret_key(w, (size_t)(eq - w)) && vl && strcmp(val, "-") &&
			    val[0] != '@')
				put = "********";
			else if ((size_t)(eq - w) == 6 && memcmp(w, "origin", 6) == 0 &&
			         strcmp(hl_uri_redact(val, false, shown, sizeof(shown)), val))
				put = shown;
			explicit_bzero(val, sizeof(val));
		}
		if (put) {
			o +=
			    (size_t)snprintf(out + o, len - o, "%.*s%s", (int)(eq + 1 - w), w, put);
		} else {
			if (put_len > len - 1 - o)
				put_len = len - 1 - o;
			memcpy(out + o, w, put_len);
			o += put_len;
		}
		if (o >= len)
			o = len - 1;
		out[o] = '\0';
	}
	out[o < len ? o : len - 1] = '\0';
}

/* Write the history only its owner can read (it names the whole tree). */
static void save_history(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);

	if (fd < 0)
		return;
	fchmod(fd, 0600); /* a file an older hotlunctl left readable by others */
	close(fd);
	write_history(path);
}

void cli_shell_run(const char *socket_path)
{
	char prompt[1100], hist[PATH_MAX] = "";
	const char *home = getenv("HOME");

	rl_attempted_completion_function = complete;
	using_history();
	if (home) {
		snprintf(hist, sizeof(hist), "%s/.hotlunctl_history", home);
		read_history(hist);
	}
	printf("hotlunctl %s: connected to %s. Type help for commands, Tab to complete.\n",
	       PACKAGE_VERSION, socket_path);
	for (;;) {
		snprintf(prompt, sizeof(prompt), "hotlun:%s> ", cli_cwd());
		char *line = readline(prompt);
		if (!line) {
			putchar('\n');
			break;
		}
		char *words[64], kept[4096];
		size_t len = strlen(line);
		if (*line) {
			history_line(line, kept, sizeof(kept));
			add_history(kept);
		}
		int n = cli_split_words(line, words, 64);
		if (n == 1 && (strcmp(words[0], "exit") == 0 || strcmp(words[0], "quit") == 0)) {
			free(line);
			break;
		}
		cli_run_words(n, words);
		fflush(stdout);
		explicit_bzero(line, len); /* a secret typed inline */
		free(line);
	}
	if (hist[0])
		save_history(hist);
	completion_reset();
}
