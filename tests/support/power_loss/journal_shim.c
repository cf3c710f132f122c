/* LD_PRELOAD shim: journal every change a process makes under one directory, for the power-loss tests.
 *
 * With SEGLOG_PL_ROOT=<dir> and SEGLOG_PL_JOURNAL=<file> in the environment, every successful call that
 * changes a file or a name under <dir> is appended to <file> as one record, in the order the calls
 * returned (a process-wide mutex is held across the call and its record, so the journal order is the
 * kernel's order): creates, writes with their bytes, truncations, allocations, renames, unlinks,
 * mkdir/rmdir, and the syncs (fsync, fdatasync, msync) that make earlier ones durable. Stores into
 * shared writable mappings are invisible to a shim: each mapping keeps a shadow copy, and the pages that
 * differ are journalled as writes before every sync, munmap and msync, where the kernel could have
 * written them back. tests/support/power_loss/replay.py rebuilds the directory as a power loss at any
 * record would leave it. The environment variables are removed at load, so children run untraced.
 *
 * Record: struct header (see replay.py RECORD) + path1 + path2 + data, written with one O_APPEND writev.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

enum {
    OP_CREATE = 1, OP_MKDIR, OP_WRITE, OP_TRUNCATE, OP_FALLOCATE, OP_FSYNC, OP_FDATASYNC, OP_MSYNC,
    OP_RENAME, OP_UNLINK, OP_RMDIR, OP_MARK, OP_UNSUPPORTED,
};
#define MAGIC 0x504c4a31u /* "PLJ1" */
#define FD_SLOTS 65536
#define PAGE 4096

struct record {
    uint32_t magic, op;
    int64_t ino, a, b;
    uint32_t len1, len2, datalen, pad;
};

struct mapping {
    char *addr;
    size_t len;
    int64_t off, ino;
    unsigned char *shadow;
};

static int active, journal_fd = -1;
static char root[PATH_MAX];
static size_t root_len;
static pthread_mutex_t mu;
static __thread int in_hook;
static unsigned char fd_state[FD_SLOTS]; /* 0 unknown, 1 untraced, 2 traced */
static int64_t fd_ino[FD_SLOTS];
static struct mapping *maps;
static size_t n_maps, cap_maps;

#define REAL(name) static __typeof__(name) *real_##name
REAL(open); REAL(open64); REAL(openat); REAL(openat64); REAL(creat); REAL(creat64); REAL(close);
REAL(write); REAL(pwrite); REAL(pwrite64); REAL(writev); REAL(pwritev);
REAL(ftruncate); REAL(ftruncate64); REAL(truncate); REAL(truncate64);
REAL(posix_fallocate); REAL(posix_fallocate64); REAL(fallocate); REAL(fallocate64);
REAL(fsync); REAL(fdatasync); REAL(msync); REAL(mmap); REAL(mmap64); REAL(munmap); REAL(mremap);
REAL(rename); REAL(renameat); REAL(renameat2); REAL(unlink); REAL(unlinkat); REAL(mkdir); REAL(mkdirat);
REAL(rmdir); REAL(link); REAL(linkat); REAL(symlink); REAL(symlinkat); REAL(sync); REAL(syncfs);
REAL(copy_file_range); REAL(sendfile);

static void child_after_fork(void) { active = 0; }

__attribute__((constructor)) static void init(void) {
#define LOAD(name) real_##name = (__typeof__(real_##name))dlsym(RTLD_NEXT, #name)
    LOAD(open); LOAD(open64); LOAD(openat); LOAD(openat64); LOAD(creat); LOAD(creat64); LOAD(close);
    LOAD(write); LOAD(pwrite); LOAD(pwrite64); LOAD(writev); LOAD(pwritev);
    LOAD(ftruncate); LOAD(ftruncate64); LOAD(truncate); LOAD(truncate64);
    LOAD(posix_fallocate); LOAD(posix_fallocate64); LOAD(fallocate); LOAD(fallocate64);
    LOAD(fsync); LOAD(fdatasync); LOAD(msync); LOAD(mmap); LOAD(mmap64); LOAD(munmap); LOAD(mremap);
    LOAD(rename); LOAD(renameat); LOAD(renameat2); LOAD(unlink); LOAD(unlinkat); LOAD(mkdir);
    LOAD(mkdirat); LOAD(rmdir); LOAD(link); LOAD(linkat); LOAD(symlink); LOAD(symlinkat); LOAD(sync);
    LOAD(syncfs); LOAD(copy_file_range); LOAD(sendfile);
    const char *r = getenv("SEGLOG_PL_ROOT"), *j = getenv("SEGLOG_PL_JOURNAL");
    if (r && j && realpath(r, root)) {
        root_len = strlen(root);
        journal_fd = (int)syscall(SYS_openat, AT_FDCWD, j, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (journal_fd >= 0) {
            pthread_mutexattr_t attr;
            pthread_mutexattr_init(&attr);
            pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
            pthread_mutex_init(&mu, &attr);
            pthread_atfork(NULL, NULL, child_after_fork);
            active = 1;
        }
    }
    unsetenv("SEGLOG_PL_ROOT");
    unsetenv("SEGLOG_PL_JOURNAL");
    unsetenv("LD_PRELOAD");
}

static void emit(uint32_t op, int64_t ino, int64_t a, int64_t b, const char *p1, const char *p2,
                 const void *data, size_t datalen) {
    struct record rec = {MAGIC, op, ino, a, b, p1 ? (uint32_t)strlen(p1) : 0, p2 ? (uint32_t)strlen(p2) : 0,
                         (uint32_t)datalen, 0};
    struct iovec iov[4] = {{&rec, sizeof rec}, {(void *)p1, rec.len1}, {(void *)p2, rec.len2},
                           {(void *)data, datalen}};
    size_t total = sizeof rec + rec.len1 + rec.len2 + datalen;
    ssize_t n = syscall(SYS_writev, journal_fd, iov, 4);
    if (n != (ssize_t)total) {
        static const char msg[] = "journal_shim: short journal write\n";
        syscall(SYS_write, 2, msg, sizeof msg - 1);
        abort();
    }
}

/* The path of `path` (relative to dirfd) inside root, written to out ("" for root itself): 1 when under
 * root, else 0. Lexical: "." and ".." are resolved, symlinks are not (the engine follows none). */
static int rel_path(int dirfd, const char *path, char *out) {
    char buf[2 * PATH_MAX];
    if (!path) return 0;
    if (path[0] == '/') {
        snprintf(buf, sizeof buf, "%s", path);
    } else {
        char base[PATH_MAX];
        if (dirfd == AT_FDCWD) {
            if (!getcwd(base, sizeof base)) return 0;
        } else {
            char link[64];
            snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
            ssize_t n = readlink(link, base, sizeof base - 1);
            if (n < 0) return 0;
            base[n] = 0;
        }
        snprintf(buf, sizeof buf, "%s/%s", base, path);
    }
    char norm[2 * PATH_MAX];
    size_t len = 0;
    char *save, *part = strtok_r(buf, "/", &save);
    norm[0] = 0;
    for (; part; part = strtok_r(NULL, "/", &save)) {
        if (!strcmp(part, ".")) continue;
        if (!strcmp(part, "..")) {
            while (len > 0 && norm[len - 1] != '/') len--;
            if (len > 0) len--;
            norm[len] = 0;
            continue;
        }
        len += (size_t)snprintf(norm + len, sizeof norm - len, "/%s", part);
    }
    if (len == 0) strcpy(norm, "/");
    if (strncmp(norm, root, root_len) != 0) return 0;
    if (norm[root_len] == 0) { out[0] = 0; return 1; }
    if (norm[root_len] != '/') return 0;
    snprintf(out, PATH_MAX, "%s", norm + root_len + 1);
    return 1;
}

/* Whether fd is a file or directory under root; its inode number in *ino. */
static int traced_fd(int fd, int64_t *ino) {
    if (fd < 0) return 0;
    if (fd < FD_SLOTS && fd_state[fd]) {
        *ino = fd_ino[fd];
        return fd_state[fd] == 2;
    }
    char link[64], target[PATH_MAX], rel[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    int traced = 0;
    struct stat st;
    if (n > 0) {
        target[n] = 0;
        char *deleted = strstr(target, " (deleted)");
        if (deleted) *deleted = 0;
        traced = target[0] == '/' && rel_path(AT_FDCWD, target, rel) && fstat(fd, &st) == 0 &&
                 (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode));
    }
    *ino = traced ? (int64_t)st.st_ino : 0;
    if (fd < FD_SLOTS) {
        fd_state[fd] = traced ? 2 : 1;
        fd_ino[fd] = *ino;
    }
    return traced;
}

static void forget_fd(int fd) {
    if (fd >= 0 && fd < FD_SLOTS) fd_state[fd] = 0;
}

/* Journal the pages of mapping m whose bytes differ from its shadow, as plain writes. */
static void diff_mapping(struct mapping *m) {
    for (size_t at = 0; at < m->len;) {
        size_t end = at + PAGE < m->len ? at + PAGE : m->len;
        if (memcmp(m->addr + at, m->shadow + at, end - at) == 0) { at = end; continue; }
        size_t run = end;
        while (run < m->len) {
            size_t next = run + PAGE < m->len ? run + PAGE : m->len;
            if (memcmp(m->addr + run, m->shadow + run, next - run) == 0) break;
            run = next;
        }
        memcpy(m->shadow + at, m->addr + at, run - at);
        emit(OP_WRITE, m->ino, m->off + (int64_t)at, 0, NULL, NULL, m->shadow + at, run - at);
        at = run;
    }
}

static void diff_all(void) {
    for (size_t i = 0; i < n_maps; i++) diff_mapping(&maps[i]);
}

/* After a write() to ino: the mappings of ino already show its bytes; take them into the shadows. */
static void absorb_write(int64_t ino, int64_t off, size_t len) {
    for (size_t i = 0; i < n_maps; i++) {
        struct mapping *m = &maps[i];
        if (m->ino != ino) continue;
        int64_t lo = off > m->off ? off : m->off;
        int64_t hi = off + (int64_t)len < m->off + (int64_t)m->len ? off + (int64_t)len : m->off + (int64_t)m->len;
        if (lo < hi) memcpy(m->shadow + (lo - m->off), m->addr + (lo - m->off), (size_t)(hi - lo));
    }
}

#define ENTER if (!active || in_hook) goto passthrough; in_hook = 1; pthread_mutex_lock(&mu)
#define LEAVE pthread_mutex_unlock(&mu); in_hook = 0

/* ------------------------------------------------------------------ opens */

static int do_openat(int dirfd, const char *path, int flags, mode_t mode, int (*call)(int, const char *, int, ...)) {
    char rel[PATH_MAX];
    int fd, saved;
    ENTER;
    if (!rel_path(dirfd, path, rel)) {
        LEAVE;
        goto passthrough;
    }
    struct stat st;
    int existed = fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) == 0;
    fd = call(dirfd, path, flags, mode);
    saved = errno;
    if (fd >= 0 && fstat(fd, &st) == 0 && (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))) {
        if (fd < FD_SLOTS) {
            fd_state[fd] = 2;
            fd_ino[fd] = (int64_t)st.st_ino;
        }
        if (!existed)
            emit(OP_CREATE, (int64_t)st.st_ino, 0, 0, rel, NULL, NULL, 0);
        else if ((flags & O_TRUNC) && S_ISREG(st.st_mode) && (flags & O_ACCMODE) != O_RDONLY)
            emit(OP_TRUNCATE, (int64_t)st.st_ino, 0, 0, NULL, NULL, NULL, 0);
    } else if (fd >= 0) {
        forget_fd(fd);
    }
    LEAVE;
    errno = saved;
    return fd;
passthrough:
    return call(dirfd, path, flags, mode);
}

static int openat_real(int dirfd, const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t mode = va_arg(ap, mode_t);
    va_end(ap);
    return real_openat(dirfd, path, flags, mode);
}

#define MODE_ARG                                    \
    mode_t mode = 0;                                \
    if (flags & (O_CREAT | __O_TMPFILE)) {          \
        va_list ap;                                 \
        va_start(ap, flags);                        \
        mode = va_arg(ap, mode_t);                  \
        va_end(ap);                                 \
    }

int open(const char *path, int flags, ...) { MODE_ARG; return do_openat(AT_FDCWD, path, flags, mode, openat_real); }
int open64(const char *path, int flags, ...) { MODE_ARG; return do_openat(AT_FDCWD, path, flags, mode, openat_real); }
int openat(int dirfd, const char *path, int flags, ...) { MODE_ARG; return do_openat(dirfd, path, flags, mode, openat_real); }
int openat64(int dirfd, const char *path, int flags, ...) { MODE_ARG; return do_openat(dirfd, path, flags, mode, openat_real); }
int creat(const char *path, mode_t mode) { return do_openat(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode, openat_real); }
int creat64(const char *path, mode_t mode) { return do_openat(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode, openat_real); }

int close(int fd) {
    forget_fd(fd);
    return real_close(fd);
}

/* ------------------------------------------------------------------ data */

static ssize_t traced_write(int fd, const void *buf, size_t n, off_t off, int positional) {
    int64_t ino;
    ssize_t r;
    int saved;
    if (!active || in_hook) goto passthrough;
    if (!traced_fd(fd, &ino)) goto passthrough;
    ENTER;
    r = positional ? real_pwrite64(fd, buf, n, off) : real_write(fd, buf, n);
    saved = errno;
    if (r > 0) {
        int64_t at = positional ? (int64_t)off : (int64_t)lseek(fd, 0, SEEK_CUR) - r;
        emit(OP_WRITE, ino, at, 0, NULL, NULL, buf, (size_t)r);
        absorb_write(ino, at, (size_t)r);
    }
    LEAVE;
    errno = saved;
    return r;
passthrough:
    return positional ? real_pwrite64(fd, buf, n, off) : real_write(fd, buf, n);
}

ssize_t write(int fd, const void *buf, size_t n) { return traced_write(fd, buf, n, 0, 0); }
ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) { return traced_write(fd, buf, n, off, 1); }
ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) { return traced_write(fd, buf, n, off, 1); }

static void unsupported(const char *what, const char *path) {
    emit(OP_UNSUPPORTED, 0, 0, 0, what, path, NULL, 0);
}

#define UNSUPPORTED_ON_FD(name, fd, call)           \
    int64_t ino;                                    \
    if (active && !in_hook && traced_fd(fd, &ino)) { \
        ENTER;                                      \
        unsupported(name, NULL);                    \
        LEAVE;                                      \
    }                                               \
    passthrough:                                    \
    return call

ssize_t writev(int fd, const struct iovec *iov, int cnt) { UNSUPPORTED_ON_FD("writev", fd, real_writev(fd, iov, cnt)); }
ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off) { UNSUPPORTED_ON_FD("pwritev", fd, real_pwritev(fd, iov, cnt, off)); }
ssize_t copy_file_range(int in, off_t *oin, int out, off_t *oout, size_t n, unsigned fl) {
    UNSUPPORTED_ON_FD("copy_file_range", out, real_copy_file_range(in, oin, out, oout, n, fl));
}
ssize_t sendfile(int out, int in, off_t *off, size_t n) { UNSUPPORTED_ON_FD("sendfile", out, real_sendfile(out, in, off, n)); }

int ftruncate64(int fd, off_t len) {
    int64_t ino;
    int r, saved;
    if (!active || in_hook || !traced_fd(fd, &ino)) return real_ftruncate64(fd, len);
    ENTER;
    r = real_ftruncate64(fd, len);
    saved = errno;
    if (r == 0) emit(OP_TRUNCATE, ino, (int64_t)len, 0, NULL, NULL, NULL, 0);
    LEAVE;
    errno = saved;
    return r;
passthrough:
    return real_ftruncate64(fd, len);
}
int ftruncate(int fd, off_t len) { return ftruncate64(fd, len); }

int truncate64(const char *path, off_t len) {
    char rel[PATH_MAX];
    struct stat st;
    int r, saved;
    ENTER;
    if (!rel_path(AT_FDCWD, path, rel)) {
        LEAVE;
        goto passthrough;
    }
    r = real_truncate64(path, len);
    saved = errno;
    if (r == 0 && stat(path, &st) == 0) emit(OP_TRUNCATE, (int64_t)st.st_ino, (int64_t)len, 0, NULL, NULL, NULL, 0);
    LEAVE;
    errno = saved;
    return r;
passthrough:
    return real_truncate64(path, len);
}
int truncate(const char *path, off_t len) { return truncate64(path, len); }

/* posix_fallocate returns an error number; fallocate returns -1 and sets errno. b = keep size. */
static int traced_fallocate(int fd, int mode, off_t off, off_t len, int posix) {
    int64_t ino;
    int r, saved;
    if (!active || in_hook || !traced_fd(fd, &ino)) goto passthrough;
    ENTER;
    r = posix ? real_posix_fallocate64(fd, off, len) : real_fallocate64(fd, mode, off, len);
    saved = errno;
    if (r == 0) {
        if (mode & ~FALLOC_FL_KEEP_SIZE)
            unsupported("fallocate mode", NULL);
        else
            emit(OP_FALLOCATE, ino, (int64_t)off, (int64_t)len, NULL, NULL, NULL, 0);
        if (mode & FALLOC_FL_KEEP_SIZE) unsupported("fallocate keep size", NULL);
    }
    LEAVE;
    errno = saved;
    return r;
passthrough:
    return posix ? real_posix_fallocate64(fd, off, len) : real_fallocate64(fd, mode, off, len);
}
int posix_fallocate(int fd, off_t off, off_t len) { return traced_fallocate(fd, 0, off, len, 1); }
int posix_fallocate64(int fd, off_t off, off_t len) { return traced_fallocate(fd, 0, off, len, 1); }
int fallocate(int fd, int mode, off_t off, off_t len) { return traced_fallocate(fd, mode, off, len, 0); }
int fallocate64(int fd, int mode, off_t off, off_t len) { return traced_fallocate(fd, mode, off, len, 0); }

/* ------------------------------------------------------------------ syncs */

static int traced_sync(int fd, int data_only) {
    int64_t ino;
    int r, saved;
    if (!active || in_hook || !traced_fd(fd, &ino)) goto passthrough;
    ENTER;
    diff_all();
    r = data_only ? real_fdatasync(fd) : real_fsync(fd);
    saved = errno;
    if (r == 0) emit(data_only ? OP_FDATASYNC : OP_FSYNC, ino, 0, 0, NULL, NULL, NULL, 0);
    LEAVE;
    errno = saved;
    return r;
passthrough:
    return data_only ? real_fdatasync(fd) : real_fsync(fd);
}
int fsync(int fd) { return traced_sync(fd, 0); }
int fdatasync(int fd) { return traced_sync(fd, 1); }

void sync(void) {
    if (active && !in_hook) {
        ENTER;
        unsupported("sync", NULL);
        LEAVE;
    }
passthrough:
    real_sync();
}
int syncfs(int fd) { UNSUPPORTED_ON_FD("syncfs", fd, real_syncfs(fd)); }

/* ------------------------------------------------------------------ mappings */

static void *traced_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    int64_t ino;
    void *r;
    int saved;
    if (!active || in_hook || fd < 0 || !(flags & MAP_SHARED) || !(prot & PROT_WRITE) || !traced_fd(fd, &ino))
        goto passthrough;
    ENTER;
    r = real_mmap64(addr, len, prot, flags, fd, off);
    saved = errno;
    if (r != MAP_FAILED) {
        if (n_maps == cap_maps) {
            cap_maps = cap_maps ? 2 * cap_maps : 64;
            maps = realloc(maps, cap_maps * sizeof *maps);
        }
        struct mapping *m = &maps[n_maps++];
        m->addr = r;
        m->len = len;
        m->off = (int64_t)off;
        m->ino = ino;
        m->shadow = malloc(len);
        memcpy(m->shadow, r, len); /* the file's bytes as mapped: nothing stored yet */
    }
    LEAVE;
    errno = saved;
    return r;
passthrough:
    return real_mmap64(addr, len, prot, flags, fd, off);
}
void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) { return traced_mmap(addr, len, prot, flags, fd, off); }
void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) { return traced_mmap(addr, len, prot, flags, fd, off); }

static int overlaps(struct mapping *m, const char *addr, size_t len) {
    return m->addr < addr + len && addr < m->addr + m->len;
}

int munmap(void *addr, size_t len) {
    int r, saved;
    ENTER;
    for (size_t i = 0; i < n_maps;) {
        struct mapping *m = &maps[i];
        if (!overlaps(m, addr, len)) { i++; continue; }
        diff_mapping(m); /* written back some time later: durable only once a sync covers them */
        if ((char *)addr > m->addr || (char *)addr + len < m->addr + m->len) unsupported("partial munmap", NULL);
        free(m->shadow);
        maps[i] = maps[--n_maps];
    }
    r = real_munmap(addr, len);
    saved = errno;
    LEAVE;
    errno = saved;
    return r;
passthrough:
    return real_munmap(addr, len);
}

int msync(void *addr, size_t len, int flags) {
    int r, saved;
    ENTER;
    diff_all();
    r = real_msync(addr, len, flags);
    saved = errno;
    if (r == 0 && (flags & MS_SYNC)) {
        for (size_t i = 0; i < n_maps; i++) {
            struct mapping *m = &maps[i];
            if (!overlaps(m, addr, len)) continue;
            char *lo = (char *)addr > m->addr ? (char *)addr : m->addr;
            char *hi = (char *)addr + len < m->addr + m->len ? (char *)addr + len : m->addr + m->len;
            emit(OP_MSYNC, m->ino, m->off + (lo - m->addr), hi - lo, NULL, NULL, NULL, 0);
        }
    }
    LEAVE;
    errno = saved;
    return r;
passthrough:
    return real_msync(addr, len, flags);
}

void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...) {
    void *new_addr = NULL;
    if (flags & MREMAP_FIXED) {
        va_list ap;
        va_start(ap, flags);
        new_addr = va_arg(ap, void *);
        va_end(ap);
    }
    if (active && !in_hook) {
        ENTER;
        for (size_t i = 0; i < n_maps; i++)
            if (overlaps(&maps[i], old, old_len)) unsupported("mremap", NULL);
        LEAVE;
    }
passthrough:
    return real_mremap(old, old_len, new_len, flags, new_addr);
}

/* Journal the stores into every mapping now (as unsynced writes): a test calls this before it ends its
 * process with _exit, which unmaps nothing through munmap. */
void seglog_pl_flush_mappings(void) {
    if (!active) return;
    pthread_mutex_lock(&mu);
    diff_all();
    pthread_mutex_unlock(&mu);
}

/* ------------------------------------------------------------------ names */

static int traced_rename(int olddir, const char *old, int newdir, const char *new, unsigned flags, int how) {
    char rel1[PATH_MAX], rel2[PATH_MAX];
    int r, saved;
    ENTER;
    int in1 = rel_path(olddir, old, rel1), in2 = rel_path(newdir, new, rel2);
    r = how == 0 ? real_rename(old, new) : how == 1 ? real_renameat(olddir, old, newdir, new)
                                                    : real_renameat2(olddir, old, newdir, new, flags);
    saved = errno;
    if (r == 0 && (in1 || in2)) {
        if (in1 && in2 && flags == 0)
            emit(OP_RENAME, 0, 0, 0, rel1, rel2, NULL, 0);
        else
            unsupported("rename across the root or with flags", in1 ? rel1 : rel2);
    }
    LEAVE;
    errno = saved;
    return r;
passthrough:
    return how == 0 ? real_rename(old, new) : how == 1 ? real_renameat(olddir, old, newdir, new)
                                                       : real_renameat2(olddir, old, newdir, new, flags);
}
int rename(const char *old, const char *new) { return traced_rename(AT_FDCWD, old, AT_FDCWD, new, 0, 0); }
int renameat(int od, const char *old, int nd, const char *new) { return traced_rename(od, old, nd, new, 0, 1); }
int renameat2(int od, const char *old, int nd, const char *new, unsigned fl) { return traced_rename(od, old, nd, new, fl, 2); }

static int traced_remove(int dirfd, const char *path, int flags, int how) {
    char rel[PATH_MAX];
    int r, saved;
    ENTER;
    int in = rel_path(dirfd, path, rel);
    r = how == 0 ? real_unlink(path) : how == 1 ? real_rmdir(path) : real_unlinkat(dirfd, path, flags);
    saved = errno;
    if (r == 0 && in) emit((how == 1 || (flags & AT_REMOVEDIR)) ? OP_RMDIR : OP_UNLINK, 0, 0, 0, rel, NULL, NULL, 0);
    LEAVE;
    errno = saved;
    return r;
passthrough:
    return how == 0 ? real_unlink(path) : how == 1 ? real_rmdir(path) : real_unlinkat(dirfd, path, flags);
}
int unlink(const char *path) { return traced_remove(AT_FDCWD, path, 0, 0); }
int rmdir(const char *path) { return traced_remove(AT_FDCWD, path, AT_REMOVEDIR, 1); }
int unlinkat(int dirfd, const char *path, int flags) { return traced_remove(dirfd, path, flags, 2); }

static int traced_mkdir(int dirfd, const char *path, mode_t mode) {
    char rel[PATH_MAX];
    struct stat st;
    int r, saved;
    ENTER;
    int in = rel_path(dirfd, path, rel);
    r = real_mkdirat(dirfd, path, mode);
    saved = errno;
    if (r == 0 && in && fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) == 0)
        emit(OP_MKDIR, (int64_t)st.st_ino, 0, 0, rel, NULL, NULL, 0);
    LEAVE;
    errno = saved;
    return r;
passthrough:
    return real_mkdirat(dirfd, path, mode);
}
int mkdir(const char *path, mode_t mode) { return traced_mkdir(AT_FDCWD, path, mode); }
int mkdirat(int dirfd, const char *path, mode_t mode) { return traced_mkdir(dirfd, path, mode); }

static int traced_link(int dirfd, const char *target, const char *path, int call_result) {
    char rel[PATH_MAX];
    (void)target;
    if (call_result == 0 && active && !in_hook && rel_path(dirfd, path, rel)) {
        ENTER;
        unsupported("link or symlink", rel);
        LEAVE;
    }
passthrough:
    return call_result;
}
int link(const char *a, const char *b) { return traced_link(AT_FDCWD, a, b, real_link(a, b)); }
int linkat(int ad, const char *a, int bd, const char *b, int fl) { return traced_link(bd, a, b, real_linkat(ad, a, bd, b, fl)); }
int symlink(const char *a, const char *b) { return traced_link(AT_FDCWD, a, b, real_symlink(a, b)); }
int symlinkat(const char *a, int bd, const char *b) { return traced_link(bd, a, b, real_symlinkat(a, bd, b)); }
