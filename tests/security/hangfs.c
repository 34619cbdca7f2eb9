/* A FUSE filesystem with one file, "f", whose FLUSH is never answered. */
#define FUSE_USE_VERSION 34
#include <fuse_lowlevel.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int attr_of(fuse_ino_t ino, struct stat *st) {
    memset(st, 0, sizeof *st);
    st->st_ino = ino;
    st->st_uid = getuid();
    st->st_gid = getgid();
    if (ino == 1) { st->st_mode = S_IFDIR | 0755; st->st_nlink = 2; return 0; }
    if (ino == 2) { st->st_mode = S_IFREG | 0666; st->st_nlink = 1; return 0; }
    return -1;
}
static void do_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    struct stat st; (void)fi;
    if (attr_of(ino, &st)) fuse_reply_err(req, ENOENT); else fuse_reply_attr(req, &st, 0);
}
static void do_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
    struct fuse_entry_param e;
    if (parent != 1 || strcmp(name, "f")) { fuse_reply_err(req, ENOENT); return; }
    memset(&e, 0, sizeof e);
    e.ino = 2;
    attr_of(2, &e.attr);
    fuse_reply_entry(req, &e);
}
static void do_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) { (void)ino; fuse_reply_open(req, fi); }
static void do_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) { (void)req; (void)ino; (void)fi; /* never answered */ }
static const struct fuse_lowlevel_ops ops = {.lookup = do_lookup, .getattr = do_getattr, .open = do_open, .flush = do_flush};

int main(int argc, char **argv) {
    char *args[] = {argv[0], "-o", getuid() ? "fsname=hangfs" : "fsname=hangfs,allow_other", NULL};
    struct fuse_args fa = FUSE_ARGS_INIT(3, args);
    struct fuse_session *se;
    if (argc != 2) return 2;
    se = fuse_session_new(&fa, &ops, sizeof ops, NULL);
    if (!se || fuse_session_mount(se, argv[1])) return 1;
    printf("mounted\n");
    fflush(stdout);
    fuse_session_loop(se);
    fuse_session_unmount(se);
    return 0;
}
