/*
 * opts.h - the command-line parser of every program (kvstored, kvbench and
 * its sub-commands, kvstress, kvbatch-stat).
 *
 * A command is a table of options, each {long name, short letter, type,
 * destination, argument name, help, accepted range}. kvopt_parse() walks
 * argv once against it, writes each value into its destination (which holds
 * the default beforehand) and refuses a bad one with one line naming the
 * option, the value and what is accepted:
 *
 *     kvbench put: bad --threads '0' (accepted: 1..1024)
 *
 * --help (and -h) prints the usage text generated from the same table, with
 * each option's accepted values and default. Options are --name VALUE,
 * --name=VALUE, -x VALUE or -xVALUE; a later one overrides an earlier one;
 * "--" ends the options; other words are positional arguments.
 */
#ifndef KVBATCH_COMMON_OPTS_H
#define KVBATCH_COMMON_OPTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "parse.h"

/* The exit status of a program given a bad command line. */
#define KVOPT_EXIT_USAGE 2

/* kvopt_parse: --help (or --version) was asked for and printed; the tool exits 0. */
#define KVOPT_HELP 1

enum kvopt_type {
    KVOPT_FLAG,     /* no value; sets the int destination to 1 */
    KVOPT_COUNT,    /* a decimal integer in [lo, hi] (kvs_parse_uint, or '-' and one) */
    KVOPT_SIZE,     /* a byte size (kvs_parse_size: 4096, 4K, 64KiB, 1M) in [lo, hi] */
    KVOPT_SECONDS,  /* a duration (kvs_parse_duration, bare number: seconds) in (lo, hi] s;
                       double destination */
    KVOPT_STRING,   /* any text of lo..hi characters (hi 0: no bound); const char * destination */
    KVOPT_ENUM,     /* one of the names in choices; the destination gets its value */
    KVOPT_DURATION, /* a whole number of unit_ns (kvs_parse_duration, bare number: bare_ns, or
                       unit_ns when 0) in [lo, hi] units; integer destination */
    KVOPT_ENDPOINT, /* HOST:PORT or [V6]:PORT (kvs_parse_endpoint with flags lo);
                       struct kvs_endpoint destination */
};

/* One name of a KVOPT_ENUM and the value it stands for. */
struct kvopt_choice {
    const char *name;
    int value;
};

struct kvopt {
    const char *name; /* long name without "--", or NULL (short only) */
    char shortopt;    /* 0: none */
    enum kvopt_type type;
    void *dest;       /* written on a good value; holds the default before */
    size_t dest_size; /* sizeof(*dest) (of one element for a list): integers of 1..8 bytes */
    const char *arg;  /* the value's name in --help ("N", "SIZE"); NULL for flags */
    const char *help; /* one line; '\n' starts another */
    long long lo, hi; /* COUNT, SIZE: the range; SECONDS: (lo, hi]; STRING: its length */
    const struct kvopt_choice *choices; /* ENUM: ended by {NULL, 0} */
    int list_max;                       /* > 0: a comma list of up to list_max values... */
    int *list_len;                      /* ...stored in dest[0..*list_len) */
    const char *accepted;               /* instead of the generated "lo..hi" / names */
    const char *dflt;                   /* instead of the default read from dest ("" = none) */
    uint64_t unit_ns, bare_ns;          /* DURATION: its unit, and a bare number's */
};

/* dest and dest_size of a scalar option: KVOPT_TO(cfg.threads). */
#define KVOPT_TO(x) .dest = &(x), .dest_size = sizeof(x)
/*
 * dest, dest_size and the list fields of a list option into array a, whose
 * length goes to n: KVOPT_LIST(cfg.sizes, cfg.nsizes). Like KVOPT_TO it ends
 * on dest_size, so that arg and help can follow it in order.
 */
#define KVOPT_LIST(a, n)                                                                           \
    .list_max = (int)(sizeof(a) / sizeof((a)[0])), .list_len = &(n), .dest = (a),                  \
    .dest_size = sizeof((a)[0])

struct kvopt_cmd {
    const char *name;         /* leads every message: "kvbench put" */
    const char *usage;        /* first lines of --help ("usage: ...\n") */
    const char *footer;       /* printed after the options, or NULL */
    const struct kvopt *opts; /* ended by an entry with neither name nor shortopt */
    const char **args;        /* positional arguments go here; NULL: none accepted */
    int max_args;             /* room in args */
    int *nargs;               /* how many were given */
};

/*
 * Parses argv[1..argc) (argv[0] is the program or sub-command name).
 * Returns 0; KVOPT_HELP when --help was given (the help is on stdout and no
 * destination was written); or -EINVAL after one line on stderr saying
 * what was wrong: an unknown option, a missing or refused value, an
 * unexpected argument.
 */
int kvopt_parse(const struct kvopt_cmd *cmd, int argc, char **argv);

/* Writes "PROG VERSION" (PROG: prog's first word) for --version. */
void kvopt_version(const char *prog, FILE *f);

/* Writes the --help text of cmd (usage, one line per option with its default, footer). */
void kvopt_help(const struct kvopt_cmd *cmd, FILE *f);

/*
 * For checks across options after parsing: prints
 * "<who>: bad <what> '<value>' (accepted: <accepted>)" and returns -EINVAL.
 */
int kvopt_bad(const char *who, const char *what, const char *value, const char *accepted);

#endif /* KVBATCH_COMMON_OPTS_H */
