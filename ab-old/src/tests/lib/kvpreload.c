/*
 * kvpreload.c - running test programs with and without the shim (see
 * kvpreload.h).
 */
#include "kvpreload.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvtest.h"

const char *kvt_abs_build(const char *rel, char *out, size_t cap)
{
    char *p = realpath(kvt_build_path(rel), NULL);
    if (!p) {
        fprintf(stderr, "kvpreload: %s is not built\n", kvt_build_path(rel));
        abort();
    }
    snprintf(out, cap, "%s", p);
    free(p);
    return out;
}

/* Path of the sanitizer runtime this process runs with, and a space ("" if none). */
static void sanitizer_runtime(char *out, size_t cap)
{
    char line[PATH_MAX + 128];
    FILE *f = fopen("/proc/self/maps", "r");
    out[0] = '\0';
    if (!f) return;
    while (fgets(line, sizeof(line), f)) {
        char *p = strchr(line, '/');
        if (p && (strstr(p, "/libasan.so") || strstr(p, "/libtsan.so"))) {
            p[strcspn(p, "\n")] = '\0';
            snprintf(out, cap, "%s ", p);
            break;
        }
    }
    fclose(f);
}

const char *kvt_preload_env(const char *more, char *out, size_t cap)
{
    char san[PATH_MAX + 1], lib[PATH_MAX];
    sanitizer_runtime(san, sizeof(san));
    size_t n = (size_t)snprintf(out, cap, "LD_PRELOAD=%s%s", san,
                                kvt_abs_build("lib/libkvbatch.so", lib, sizeof(lib)));
    char words[1024];
    snprintf(words, sizeof(words), "%s", more ? more : "");
    for (char *save = NULL, *w = strtok_r(words, " ", &save); w && n < cap;
         w = strtok_r(NULL, " ", &save))
        n += (size_t)snprintf(out + n, cap - n, " %s", kvt_abs_build(w, lib, sizeof(lib)));
    if (n >= cap) {
        fprintf(stderr, "kvpreload: LD_PRELOAD longer than %zu bytes\n", cap);
        abort();
    }
    return out;
}

int kvt_run(const char *prog, const char *const args[], const char *const env[],
            const char *out_path, const char *err_path)
{
    char path[PATH_MAX];
    const char *argv[32];
    int argc = 0;
    argv[argc++] = kvt_abs_build(prog, path, sizeof(path));
    for (int i = 0; args && args[i] && argc < 31; i++)
        argv[argc++] = args[i];
    argv[argc] = NULL;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        for (int i = 0; env && env[i]; i++)
            putenv((char *)env[i]);
        int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (o < 0 || e < 0) _exit(127);
        dup2(o, 1);
        dup2(e, 2);
        execv(path, (char *const *)argv);
        _exit(127);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

char *kvt_slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    char *buf = calloc(1, 1 << 20);
    if (!f || !buf) {
        fprintf(stderr, "kvpreload: cannot read %s\n", path);
        abort();
    }
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/*
 * The sample at line (up to its value) with its pid="N" label taken out,
 * into out: name{pid="1",backend="kvs"} -> name{backend="kvs"},
 * name{pid="1"} -> name. Returns the value's text, or NULL past the end.
 */
static const char *sample_without_pid(const char *line, char *out, size_t cap)
{
    size_t eol = strcspn(line, "\n");
    const char *brace = memchr(line, '{', eol);
    const char *close = brace ? memchr(brace, '}', eol - (size_t)(brace - line)) : NULL;
    const char *from = close ? close : line;
    const char *sp = memchr(from, ' ', eol - (size_t)(from - line));
    if (!sp || (size_t)(sp - line) >= cap) return NULL;
    size_t n = (size_t)(sp - line);
    memcpy(out, line, n);
    out[n] = '\0';
    char *pid = strstr(out, "pid=\"");
    char *end = pid ? strchr(pid + 5, '"') : NULL;
    if (end) {
        end++;
        if (*end == ',')
            end++;
        else if (pid[-1] == ',')
            pid--;
        memmove(pid, end, strlen(end) + 1);
        size_t l = strlen(out);
        if (l >= 2 && strcmp(out + l - 2, "{}") == 0) out[l - 2] = '\0';
    }
    return sp + 1;
}

double kvt_metric(const char *text, const char *name)
{
    char sample[1024];
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (*p == '#') continue;
        const char *v = sample_without_pid(p, sample, sizeof(sample));
        if (v && strcmp(sample, name) == 0) return strtod(v, NULL);
    }
    return -1;
}

double kvt_metric_sum(const char *text, const char *name)
{
    char sample[1024];
    double sum = -1;
    size_t len = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (*p == '#') continue;
        const char *v = sample_without_pid(p, sample, sizeof(sample));
        if (!v || strncmp(sample, name, len) != 0 || (sample[len] && sample[len] != '{')) continue;
        if (strchr(name, '{') && sample[len]) continue;
        sum = (sum < 0 ? 0 : sum) + strtod(v, NULL);
    }
    return sum;
}
