/*
 * file.h - small files written and read where other users may have planted
 * something: the shim's stats file (often in /tmp, written by a process that
 * may run as root) and kvbatch-stat's copy of it. Nothing here follows a
 * link it did not ask for, replaces what is not a regular file, waits on a
 * fifo or a device, or reads without bound.
 */
#ifndef KVS_FILE_H
#define KVS_FILE_H

#include <stddef.h>
#include <sys/types.h>

/*
 * Replaces path with data[0..len), atomically for its readers: a new file
 * beside it, "<path>.tmp.<16 random hex digits>", created with
 * O_CREAT|O_EXCL|O_NOFOLLOW (mode, less the umask) - so whatever another user
 * planted at such a name, a symbolic or hard link or a file, is never
 * opened: the name is taken, another is tried - then rename() over path.
 * A path that exists and is not a regular file (a symbolic link, a device
 * such as /dev/full, a fifo, a directory) is left as it is: -EEXIST.
 * 0, or a negative errno (the temporary file is removed).
 */
int kvs_file_replace(const char *path, const void *data, size_t len, mode_t mode);

/*
 * Reads the regular file at path into buf[0..cap) and NUL-terminates it:
 * returns its length, -EINVAL when path is not a regular file (it is opened
 * O_NONBLOCK, so a fifo does not hold the open up), -EFBIG when it holds cap
 * bytes or more (nothing past cap is read), or another negative errno.
 */
ssize_t kvs_file_read(const char *path, char *buf, size_t cap);

#endif /* KVS_FILE_H */
