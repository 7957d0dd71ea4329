/*
 * cli_internal.h - what the files of hotlunctl share: the connection to
 * hotlund and the path and command machinery (hotlunctl.c), the stats
 * command's rendering (cli_stats.c) and the interactive shell with its
 * completion and history (cli_shell.c). Not installed.
 */
#ifndef HOTLUN_CLI_INTERNAL_H
#define HOTLUN_CLI_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A command of the shell and of the command line: runs at path (resolved). */
struct cli_command {
	const char *name;
	const char *usage;
	int (*fn)(const char *path, int argc, char **argv);
};

/* Every command, ended by a NULL name (hotlunctl.c). */
extern const struct cli_command cli_commands[];

/*
 * Send request cmd with args (callee takes args; NULL: none). @return the
 * result (a new reference), or NULL after printing the error.
 */
json_t *cli_request(const char *cmd, json_t *args);
/* Resolve p against the current folder into out: "..", "." and absolute paths. */
void cli_resolve(const char *p, char *out, size_t len);
/* The current folder (valid until the next cd). */
const char *cli_cwd(void);
/* v as indented JSON with sorted keys, on stdout. */
void cli_print_json(json_t *v);
/* Is the key of len bytes a secret's (..._secret)? */
bool cli_secret_key(const char *key, size_t len);
/* The parameter names ("key=") the node at path takes, NULL-ended; NULL: none. */
const char *const *cli_params_for(const char *path);
/* Run one command line split in words: [PATH] COMMAND ARGS. @return its exit status */
int cli_run_words(int argc, char **argv);
/* Split line on blanks ("double quotes" keep them) into at most max words; modifies line. */
int cli_split_words(char *line, char **words, int max);

/* stats [--json] [--watch [SECONDS]] (cli_stats.c). */
int cli_cmd_stats(const char *path, int argc, char **argv);

/* The interactive shell on a terminal, until exit, quit or end of input (cli_shell.c). */
void cli_shell_run(const char *socket_path);

/* Integer member k of o (0 when it has none). */
static inline uint64_t cli_jint(json_t *o, const char *k)
{
	return (uint64_t)json_integer_value(json_object_get(o, k));
}

#endif
