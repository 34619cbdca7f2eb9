/*
 * The floor for any FUSE ioctl on this machine: a minimal libfuse3
 * low-level server with one regular file, "file", that answers every
 * restricted ioctl with result 1 and out_size bytes of zeros (the same
 * 256 bytes PIOCGETEVCTRS returns, so the copy cost is the same).
 *
 * Single-threaded (fuse_session_loop), like pyfuse3's loop, so the only
 * difference from hwperfd is what runs between reading the request and
 * writing the reply.
 *
 *     floor_server MOUNTPOINT        (foreground; SIGTERM/SIGINT unmount)
 */
#define FUSE_USE_VERSION 35
#include <fuse_lowlevel.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FILE_INO 2
#define FILE_NAME "file"
#define MAX_OUT 16384

static unsigned char zeros[MAX_OUT];

static void fill_attr(fuse_ino_t ino, struct stat *st)
{
    memset(st, 0, sizeof *st);
    st->st_ino = ino;
    if (ino == FUSE_ROOT_ID) {
        st->st_mode = S_IFDIR | 0755;
        st->st_nlink = 2;
    } else {
        st->st_mode = S_IFREG | 0666;
        st->st_nlink = 1;
    }
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct fuse_entry_param e;
    if (parent != FUSE_ROOT_ID || strcmp(name, FILE_NAME) != 0) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    memset(&e, 0, sizeof e);
    e.ino = FILE_INO;
    e.attr_timeout = 1.0;
    e.entry_timeout = 1.0;
    fill_attr(FILE_INO, &e.attr);
    fuse_reply_entry(req, &e);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct stat st;
    (void)fi;
    if (ino != FUSE_ROOT_ID && ino != FILE_INO) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    fill_attr(ino, &st);
    fuse_reply_attr(req, &st, 1.0);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    if (ino != FILE_INO) {
        fuse_reply_err(req, EISDIR);
        return;
    }
    fi->direct_io = 1; /* as hwperfd's files */
    fuse_reply_open(req, fi);
}

static void op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
                     struct fuse_file_info *fi, unsigned flags, const void *in_buf,
                     size_t in_bufsz, size_t out_bufsz)
{
    (void)ino; (void)cmd; (void)arg; (void)fi; (void)in_buf; (void)in_bufsz;
    if (flags & FUSE_IOCTL_UNRESTRICTED) {
        fuse_reply_err(req, ENOTTY);
        return;
    }
    if (out_bufsz > MAX_OUT)
        out_bufsz = MAX_OUT;
    fuse_reply_ioctl(req, 1, out_bufsz ? zeros : NULL, out_bufsz);
}

static const struct fuse_lowlevel_ops ops = {
    .lookup = op_lookup,
    .getattr = op_getattr,
    .open = op_open,
    .ioctl = op_ioctl,
};

int main(int argc, char **argv)
{
    char *fake_argv[] = {argv[0], "-o", "fsname=hwperfd-floor,subtype=floor", NULL};
    struct fuse_args args = FUSE_ARGS_INIT(3, fake_argv);
    struct fuse_session *se;
    int ret = 1;

    if (argc != 2) {
        fprintf(stderr, "usage: %s MOUNTPOINT\n", argv[0]);
        return 2;
    }
    se = fuse_session_new(&args, &ops, sizeof ops, NULL);
    if (se == NULL)
        return 1;
    if (fuse_set_signal_handlers(se) != 0)
        goto out_destroy;
    if (fuse_session_mount(se, argv[1]) != 0)
        goto out_signals;
    ret = fuse_session_loop(se) ? 1 : 0;
    fuse_session_unmount(se);
out_signals:
    fuse_remove_signal_handlers(se);
out_destroy:
    fuse_session_destroy(se);
    fuse_opt_free_args(&args);
    return ret;
}
