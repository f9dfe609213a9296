/*
 * statsfile.c - atomic stats-file writes, and the parts of the file that are
 * not the batcher's counters: the settings and the transport's counters.
 */
#include "statsfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int kvb_write_file_atomic(const char *path, const char *text, size_t len)
{
    char tmp[KVB_STATS_PATH_MAX + 32];
    int rc = 0;
    if (snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof(tmp))
        return -ENAMETOOLONG;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -errno;
    for (size_t off = 0; off < len;) {
        ssize_t n = write(fd, text + off, len - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            rc = n < 0 ? -errno : -EIO;
            goto out_close;
        }
        off += (size_t)n;
    }
    if (close(fd) < 0) {
        rc = -errno;
        goto out_unlink;
    }
    if (rename(tmp, path) < 0) {
        rc = -errno;
        goto out_unlink;
    }
    return 0;

out_close:
    close(fd);
out_unlink:
    unlink(tmp);
    return rc;
}

size_t kvb_settings_render(const struct kvb_config *cfg, int passthrough, double start_time,
                           double now, char *buf, size_t cap)
{
    int n = snprintf(
        buf, cap,
        "# HELP kvbatch_info The shim's mode; pass-through is 1 when it does not batch.\n"
        "# TYPE kvbatch_info gauge\n"
        "kvbatch_info{policy=\"%s\",put_mode=\"%s\",passthrough=\"%d\"} 1\n"
        "# HELP kvbatch_setting_window_seconds KVBATCH_WINDOW_US in effect.\n"
        "# TYPE kvbatch_setting_window_seconds gauge\nkvbatch_setting_window_seconds %.9g\n"
        "# HELP kvbatch_setting_max_ops KVBATCH_MAX_OPS in effect.\n"
        "# TYPE kvbatch_setting_max_ops gauge\nkvbatch_setting_max_ops %u\n"
        "# HELP kvbatch_setting_max_bytes KVBATCH_MAX_BYTES in effect.\n"
        "# TYPE kvbatch_setting_max_bytes gauge\nkvbatch_setting_max_bytes %llu\n"
        "# HELP kvbatch_setting_max_inflight KVBATCH_MAX_INFLIGHT in effect.\n"
        "# TYPE kvbatch_setting_max_inflight gauge\nkvbatch_setting_max_inflight %u\n"
        "# HELP kvbatch_setting_writeback_bytes KVBATCH_WRITEBACK_BYTES in effect.\n"
        "# TYPE kvbatch_setting_writeback_bytes gauge\nkvbatch_setting_writeback_bytes %llu\n"
        "# HELP kvbatch_start_time_seconds When the shim started (Unix time).\n"
        "# TYPE kvbatch_start_time_seconds gauge\nkvbatch_start_time_seconds %.3f\n"
        "# HELP kvbatch_write_time_seconds When this file was written (Unix time).\n"
        "# TYPE kvbatch_write_time_seconds gauge\nkvbatch_write_time_seconds %.3f\n",
        kvb_policy_name(cfg->policy), kvb_put_mode_name(cfg->put_mode), passthrough ? 1 : 0,
        (double)cfg->window_ns / 1e9, cfg->max_ops, (unsigned long long)cfg->max_bytes,
        cfg->max_inflight, (unsigned long long)cfg->writeback_bytes, start_time, now);
    return n < 0 ? 0 : (size_t)n;
}

void kvb_transport_add(void *arg, const char *server, const char *name, uint64_t value)
{
    struct kvb_transport_totals *t = arg;
    for (unsigned i = 0; i < t->n; i++)
        if (strcmp(t->e[i].server, server) == 0 && strcmp(t->e[i].name, name) == 0) {
            t->e[i].value += value;
            return;
        }
    if (t->n == KVB_TRANSPORT_MAX || strlen(server) >= sizeof(t->e[0].server) ||
        strlen(name) >= sizeof(t->e[0].name)) {
        t->dropped++;
        return;
    }
    snprintf(t->e[t->n].server, sizeof(t->e[0].server), "%s", server);
    snprintf(t->e[t->n].name, sizeof(t->e[0].name), "%s", name);
    t->e[t->n].value = value;
    t->n++;
}

/* Copies s as a Prometheus label value: backslash, quote and newline escaped. */
static void label_escape(const char *s, char *out, size_t cap)
{
    size_t o = 0;
    for (; *s && o + 2 < cap; s++) {
        if (*s == '\\' || *s == '"' || *s == '\n') out[o++] = '\\';
        out[o++] = *s == '\n' ? 'n' : *s;
    }
    out[o] = '\0';
}

size_t kvb_transport_render(const struct kvb_transport_totals *t, char *buf, size_t cap)
{
    size_t at = 0;
    int n = snprintf(buf, cap,
                     "# HELP kvbatch_transport_total libkvstore's transport counters for this "
                     "process's clients, per server: frames and system calls on TCP; doorbells "
                     "(ibv_post_send calls), work requests, completions and round trips on RDMA.\n"
                     "# TYPE kvbatch_transport_total counter\n");
    if (n < 0) return 0;
    at = (size_t)n;
    for (unsigned i = 0; i < t->n; i++) {
        char server[2 * sizeof(t->e[0].server)];
        label_escape(t->e[i].server, server, sizeof(server));
        n = snprintf(at < cap ? buf + at : NULL, at < cap ? cap - at : 0,
                     "kvbatch_transport_total{server=\"%s\",counter=\"%s\"} %llu\n", server,
                     t->e[i].name, (unsigned long long)t->e[i].value);
        if (n < 0) return 0;
        at += (size_t)n;
    }
    n = snprintf(at < cap ? buf + at : NULL, at < cap ? cap - at : 0,
                 "# HELP kvbatch_transport_dropped Transport counters left out of "
                 "kvbatch_transport_total (table full).\n"
                 "# TYPE kvbatch_transport_dropped gauge\nkvbatch_transport_dropped %u\n",
                 t->dropped);
    return n < 0 ? 0 : at + (size_t)n;
}
