/*
 * libcpc: Solaris libcpc(3LIB), version 2, on hwperfd.
 *
 * As on Solaris, sets, requests and buffers live here in the client; the
 * daemon (<mount>/cpc) checks a packed set when it is bound, counts, and
 * answers samples.  Every call to the daemon is one HWPERFD_CPCIO_* ioctl
 * carrying struct hwperfd_cpc_io (all of it for a bind, its head for the
 * rest: <sys/cpc_impl.h>); the reply holds the errno and the error
 * subcode, which goes to the error handler (cpc_seterrhndlr(3CPC)) or, with
 * none, to stderr as "libcpc: FUNCTION: MESSAGE", Solaris's messages.
 *
 * At cpc_open the library reads <mount>/cpc (the model: counters,
 * capabilities, names, events per PIC, generic events, attributes) and, if
 * the program leaves it alone, takes HWPERFD_CPC_SIGCARRIER: the daemon
 * signals an overflow with it, and the handler here raises SIGEMT in the
 * same thread with si_code EMT_CPCOVF and si_addr the interrupted PC
 * (rt_tgsigqueueinfo to oneself may carry any si_code).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <libcpc.h>
#include <hwperfd/state.h>
#include "../reconnect.h"

#define MAX_LIST 65536
#define OVF_SIGNAL 60		/* SIGRTMAX - 4: the overflow timer's (lib/overflow_timer.h) */
#include "../overflow_timer.h"

enum cs_state { CS_UNBOUND, CS_BOUND_CURLWP, CS_BOUND_PCTX, CS_BOUND_CPU };

struct request {
	char		event[HWPERFD_CPC_EVLEN];
	uint64_t	preset;
	uint_t		flags;
	uint_t		nattrs;
	struct hwperfd_cpc_attr attr[HWPERFD_CPC_MAXATTRS];
};

struct __cpc_set {
	struct __cpc_set *next;
	struct request	*req;
	int		nreqs;
	enum cs_state	state;
	int		fd;		/* cpc_bind_cpu: the file that holds the CPU */
	processorid_t	cpu;
	cpu_set_t	obind;		/* the affinity before cpc_bind_cpu */
	pid_t		pid;		/* cpc_bind_pctx: the process and LWP */
	id_t		id;
	pid_t		thr;		/* the thread that bound it */
	struct hwperfd_state_reader page; /* curlwp: the set's page (page.page NULL: none) */
	int		serial;		/* the binding the page must show (its hs_generation) */
	int		page_tried;	/* asked for since the last bind or a page's end */
};

struct __cpc_buf {
	struct __cpc_buf *next;
	int		n;
	uint64_t	*data;
	hrtime_t	hrtime;
	uint64_t	tick;
};

struct __cpc {
	int		fd;
	uint_t		npic;
	uint_t		caps;
	int		ncpus;
	char		cciname[CPC_MAX_IMPL_NAME];
	char		cpuref[CPC_MAX_CPUREF];
	char		*attrs;		/* comma-separated */
	char		**events;	/* per PIC, comma-separated */
	char		**generic;	/* per PIC, comma-separated */
	cpc_errhndlr_t	*errfn;
	struct __cpc_set *sets;
	struct __cpc_buf *bufs;
	pthread_mutex_t	lock;
};

struct __pctx {
	pid_t	pid;
};

/* libcpc's messages (Solaris's words), by subcode. */
static const char *const errstr[] = {
	"",
	"Unknown event\n",
	"Invalid counter number\n",
	"Unknown attribute\n",
	"Attribute out of range\n",
	"Hardware resource unavailable\n",
	"Counter cannot count requested event\n",
	"Invalid flags in a request\n",
	"Requests conflict with each other\n",
	"Attribute requires the cpc_cpu privilege\n",
	"Couldn't bind LWP to requested processor\n",
	"Hypervisor event access denied\n",
};

static void cpc_err(cpc_t *cpc, const char *fn, int subcode, ...)
{
	va_list ap;
	int saved = errno;

	if (subcode < 1 || subcode >= (int)(sizeof errstr / sizeof errstr[0]))
		return;
	va_start(ap, subcode);
	if (cpc->errfn != NULL)
		cpc->errfn(fn, subcode, errstr[subcode], ap);
	else
		(void) fprintf(stderr, "libcpc: %s: %s", fn, errstr[subcode]);
	va_end(ap);
	errno = saved;
}

int _lwp_self(void)
{
	return (int)syscall(SYS_gettid);
}

/* -- the lock: SIGEMT and the carrier are held while the lists change ---- */

static int unbind(cpc_t *cpc, cpc_set_t *set);

/* The calling thread's id, without a system call per sample (a forked
 * child's thread asks again). */
static __thread pid_t my_tid;
static pthread_once_t tid_hook = PTHREAD_ONCE_INIT;

static void forget_tid(void)
{
	my_tid = 0;
}

static void hook_tid(void)
{
	pthread_atfork(NULL, NULL, forget_tid);
}

static pid_t self_tid(void)
{
	if (my_tid == 0) {
		pthread_once(&tid_hook, hook_tid);
		my_tid = (pid_t)syscall(SYS_gettid);
	}
	return my_tid;
}

static void cpc_lock(cpc_t *cpc, sigset_t *old)
{
	sigset_t block;

	sigemptyset(&block);
	sigaddset(&block, SIGEMT);
	sigaddset(&block, HWPERFD_CPC_SIGCARRIER);
	pthread_sigmask(SIG_BLOCK, &block, old);
	pthread_mutex_lock(&cpc->lock);
}

static void cpc_unlock(cpc_t *cpc, sigset_t *old)
{
	pthread_mutex_unlock(&cpc->lock);
	pthread_sigmask(SIG_SETMASK, old, NULL);
}

/* -- the overflow signal ------------------------------------------------- */

/*
 * Sets bound (any kind) in this process.  The daemon's signal travels
 * apart from the calls: one that arrives after the last set was unbound
 * is dropped, as no SIGEMT follows cpc_unbind on Solaris.
 */
static volatile int bound_sets;

static void carrier(int sig, siginfo_t *info, void *arg)
{
	ucontext_t *uc = arg;
	siginfo_t si;
	int saved = errno;

	(void) sig;
	(void) info;
	if (bound_sets <= 0)
		return;
	memset(&si, 0, sizeof si);
	si.si_signo = SIGEMT;
	si.si_code = EMT_CPCOVF;
#if defined(__x86_64__)
	si.si_addr = (void *)uc->uc_mcontext.gregs[REG_RIP];
#else
	(void) uc;
#endif
	(void) syscall(SYS_rt_tgsigqueueinfo, getpid(), (pid_t)syscall(SYS_gettid), SIGEMT, &si);
	errno = saved;
}

static void take_carrier(void)
{
	struct sigaction sa, old;

	if (sigaction(HWPERFD_CPC_SIGCARRIER, NULL, &old) == 0 &&
	    !(old.sa_flags & SA_SIGINFO) && old.sa_handler != SIG_DFL)
		return;		/* the program's own */
	if ((old.sa_flags & SA_SIGINFO) && old.sa_sigaction == carrier)
		return;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = carrier;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	/*
	 * SIGEMT stays blocked in the carrier's handler: the SIGEMT it queues
	 * is delivered once the carrier returns, at the interrupted point, so
	 * the program's handler sees the program's own context (%pc, %sp).
	 */
	sigemptyset(&sa.sa_mask);
	sigaddset(&sa.sa_mask, SIGEMT);
	(void) sigaction(HWPERFD_CPC_SIGCARRIER, &sa, NULL);
}

/* -- talking to the daemon ------------------------------------------------ */

static int node_path(char *path, size_t size)
{
	const char *mount = getenv("HWPERFD_MOUNT");

	if (mount == NULL || *mount == '\0')
		mount = "/run/hwperfd";
	if (snprintf(path, size, "%s/cpc", mount) >= (int)size) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return 0;
}

static int open_node(void)
{
	char path[4096];

	if (node_path(path, sizeof path) < 0)
		return -1;
	return open(path, O_RDONLY | O_CLOEXEC);
}

/* -- the overflow timer (lib/overflow_timer.h) ------------------------- */

/* A call on the calling LWP's own set asks (HWPERFD_CPC_TIMED) for the CPU
   time left before its nearest overflow interrupt: arm for it.  Only where
   the timer can ring: asking tells the daemon the thread times itself, and
   its tick then looks only as the fallback. */
static void ovf_timed(struct hwperfd_cpc_io *io)
{
	if (ovf_ready(&ovf_self))
		io->ci_preset = HWPERFD_CPC_TIMED;
}

static void ovf_took(int fd, unsigned gen, const struct hwperfd_cpc_io *io)
{
	ovf_answer(fd, HWPERFD_CPC_SIGCARRIER, gen, io->ci_preset, io->ci_preset == HWPERFD_CPC_NO_OVERFLOW);
}

/* The look at the instant: a sample of the LWP's own set, which finds the
   overflow; its carrier is held until the timer's handler returns.  EINTR:
   the overflow's SIGEMT is on its way, and cpc_set_restart arms again. */
static void ovf_look(int fd)
{
	struct hwperfd_cpc_io io;
	unsigned gen = ovf_self.gen;

	memset(&io, 0, HWPERFD_CPC_HEAD_SIZE);	/* a head-only call */
	io.ci_target = HWPERFD_CPC_LWP;
	io.ci_preset = HWPERFD_CPC_LOOK;	/* timed, and never made again */
	if (ioctl(fd, HWPERFD_CPCIO_SAMPLE, &io) == 0 && io.ci_error == 0)
		ovf_took(fd, gen, &io);
	else if (gen == ovf_self.gen)
		ovf_disarm();
}

/* One call; -1 with errno (and the subcode through the handler) on refusal. */
static int cpc_call(cpc_t *cpc, int fd, unsigned long cmd, struct hwperfd_cpc_io *io, const char *fn)
{
	int r;

	io->ci_error = 0;
	io->ci_subcode = -1;
	/* EINTR: an overflow's SIGEMT came first (its handler has run); the
	   daemon lets the call made again take effect. */
	char path[4096];

	/* A restart of the daemon is ridden out: the file is opened again
	   onto the same descriptor and the call repeated; the new daemon put
	   the LWP's set (or the CPU's, for this process) back (reconnect.h). */
	r = hwperfd_ioctl(fd, node_path(path, sizeof path) == 0 ? path : NULL, cmd, io);
	if (r < 0)
		return -1;
	if (io->ci_error != 0) {
		errno = io->ci_error;
		if (io->ci_subcode != -1 && fn != NULL)
			cpc_err(cpc, fn, io->ci_subcode);
		errno = io->ci_error;
		return -1;
	}
	return 0;
}

static char *dupvalue(const char *line, size_t keylen)
{
	const char *v = line + keylen;

	while (*v == ' ')
		v++;
	return strdup(v);
}

static int parse_node(cpc_t *cpc, char *text)
{
	char *line, *save = NULL, *end;
	uint_t pic;

	for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
		if (sscanf(line, "npic %u", &cpc->npic) == 1 && cpc->events == NULL) {
			if (cpc->npic == 0 || cpc->npic > HWPERFD_CPC_MAXREQS)
				return -1;
			cpc->events = calloc(cpc->npic, sizeof(char *));
			cpc->generic = calloc(cpc->npic, sizeof(char *));
			if (cpc->events == NULL || cpc->generic == NULL)
				return -1;
		} else if (sscanf(line, "caps %u", &cpc->caps) == 1) {
			continue;
		} else if (sscanf(line, "ncpus %d", &cpc->ncpus) == 1) {
			continue;
		} else if (strncmp(line, "cciname ", 8) == 0) {
			snprintf(cpc->cciname, sizeof cpc->cciname, "%s", line + 8);
		} else if (strncmp(line, "cpuref ", 7) == 0) {
			snprintf(cpc->cpuref, sizeof cpc->cpuref, "%s", line + 7);
		} else if (strncmp(line, "attrs", 5) == 0 && (line[5] == ' ' || line[5] == '\0')) {
			free(cpc->attrs);
			cpc->attrs = dupvalue(line, 5);
		} else if (cpc->events != NULL && strncmp(line, "pic", 3) == 0 && isdigit((unsigned char)line[3])) {
			if ((pic = (uint_t)strtoul(line + 3, &end, 10)) < cpc->npic) {
				free(cpc->events[pic]);
				cpc->events[pic] = dupvalue(end, 0);
			}
		} else if (cpc->events != NULL && strncmp(line, "generic", 7) == 0 &&
		    isdigit((unsigned char)line[7])) {
			if ((pic = (uint_t)strtoul(line + 7, &end, 10)) < cpc->npic) {
				free(cpc->generic[pic]);
				cpc->generic[pic] = dupvalue(end, 0);
			}
		}
	}
	if (cpc->events == NULL || cpc->attrs == NULL)
		return -1;
	for (pic = 0; pic < cpc->npic; pic++) {
		if (cpc->events[pic] == NULL)
			cpc->events[pic] = strdup("");
		if (cpc->generic[pic] == NULL)
			cpc->generic[pic] = strdup("");
		if (cpc->events[pic] == NULL || cpc->generic[pic] == NULL)
			return -1;
	}
	return 0;
}

static void free_handle(cpc_t *cpc)
{
	uint_t i;

	if (cpc->events != NULL)
		for (i = 0; i < cpc->npic; i++)
			free(cpc->events[i]);
	if (cpc->generic != NULL)
		for (i = 0; i < cpc->npic; i++)
			free(cpc->generic[i]);
	free(cpc->events);
	free(cpc->generic);
	free(cpc->attrs);
	if (cpc->fd >= 0)
		close(cpc->fd);
	pthread_mutex_destroy(&cpc->lock);
	free(cpc);
}

cpc_t *cpc_open(int ver)
{
	cpc_t *cpc;
	char *text;
	ssize_t n, got = 0;
	int error;

	if (ver != CPC_VER_CURRENT) {
		errno = EINVAL;
		return NULL;
	}
	if ((cpc = calloc(1, sizeof *cpc)) == NULL) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&cpc->lock, NULL);
	cpc->ncpus = 1;
	if ((cpc->fd = open_node()) < 0) {
		error = errno;
		free_handle(cpc);
		errno = error == ENOENT ? ENOSYS : error;	/* no counters here */
		return NULL;
	}
	if ((text = malloc(MAX_LIST)) == NULL) {
		free_handle(cpc);
		errno = ENOMEM;
		return NULL;
	}
	while (got < MAX_LIST - 1 && (n = pread(cpc->fd, text + got, MAX_LIST - 1 - got, got)) > 0)
		got += n;
	text[got] = '\0';
	if (parse_node(cpc, text) < 0) {
		free(text);
		free_handle(cpc);
		errno = EIO;
		return NULL;
	}
	free(text);
	take_carrier();
	return cpc;
}

int cpc_close(cpc_t *cpc)
{
	while (cpc->sets != NULL)
		(void) cpc_set_destroy(cpc, cpc->sets);
	while (cpc->bufs != NULL)
		(void) cpc_buf_destroy(cpc, cpc->bufs);
	free_handle(cpc);
	return 0;
}

uint_t cpc_npic(cpc_t *cpc)
{
	return cpc->npic;
}

uint_t cpc_caps(cpc_t *cpc)
{
	return cpc->caps;
}

const char *cpc_cciname(cpc_t *cpc)
{
	return cpc->cciname;
}

const char *cpc_cpuref(cpc_t *cpc)
{
	return cpc->cpuref;
}

int cpc_seterrhndlr(cpc_t *cpc, cpc_errhndlr_t *fn)
{
	cpc->errfn = fn;
	return 0;
}

/* -- names ------------------------------------------------------------------ */

/* Call action on each name of a comma-separated list. */
static void walk_list(const char *list, void (*each)(void *, const char *), void *arg)
{
	char *copy, *p, *e;

	if (list == NULL || *list == '\0' || (copy = strdup(list)) == NULL)
		return;
	for (p = copy; p != NULL; p = e) {
		if ((e = strchr(p, ',')) != NULL)
			*e++ = '\0';
		if (*p != '\0')
			each(arg, p);
	}
	free(copy);
}

static int in_list(const char *list, const char *name)
{
	size_t n = strlen(name);
	const char *p = list;

	if (n == 0)
		return 0;
	while (p != NULL && *p != '\0') {
		if (strncmp(p, name, n) == 0 && (p[n] == ',' || p[n] == '\0'))
			return 1;
		p = strchr(p, ',');
		if (p != NULL)
			p++;
	}
	return 0;
}

/*
 * Solaris's rule: a name the PIC lists, or a raw code strtol reads as nonzero
 * to the end of the name (a name that only begins with a number is none; the
 * daemon takes raw codes alike).
 */
static int valid_event(cpc_t *cpc, uint_t pic, const char *ev)
{
	char *end;

	if (in_list(cpc->events[pic], ev) || in_list(cpc->generic[pic], ev))
		return 1;
	return strtol(ev, &end, 0) != 0 && end != ev && *end == '\0';
}

struct pic_walk {
	void	*arg;
	uint_t	pic;
	void	(*action)(void *, uint_t, const char *);
};

static void pic_each(void *arg, const char *name)
{
	struct pic_walk *w = arg;

	w->action(w->arg, w->pic, name);
}

void cpc_walk_events_pic(cpc_t *cpc, uint_t picno, void *arg,
    void (*action)(void *arg, uint_t picno, const char *event))
{
	struct pic_walk w = { arg, picno, action };

	if (picno >= cpc->npic) {
		errno = EINVAL;
		return;
	}
	walk_list(cpc->events[picno], pic_each, &w);
}

void cpc_walk_generic_events_pic(cpc_t *cpc, uint_t picno, void *arg,
    void (*action)(void *arg, uint_t picno, const char *event))
{
	struct pic_walk w = { arg, picno, action };

	if (picno >= cpc->npic) {
		errno = EINVAL;
		return;
	}
	walk_list(cpc->generic[picno], pic_each, &w);
}

struct all_walk {
	char	**lists;
	uint_t	pic;
	void	*arg;
	void	(*action)(void *, const char *);
};

/* Each name once: only where it first appears, in PIC order. */
static void all_each(void *arg, const char *name)
{
	struct all_walk *w = arg;
	uint_t i;

	for (i = 0; i < w->pic; i++)
		if (in_list(w->lists[i], name))
			return;
	w->action(w->arg, name);
}

static void walk_all(cpc_t *cpc, char **lists, void *arg, void (*action)(void *, const char *))
{
	struct all_walk w = { lists, 0, arg, action };

	for (w.pic = 0; w.pic < cpc->npic; w.pic++)
		walk_list(lists[w.pic], all_each, &w);
}

void cpc_walk_events_all(cpc_t *cpc, void *arg, void (*action)(void *arg, const char *event))
{
	walk_all(cpc, cpc->events, arg, action);
}

void cpc_walk_generic_events_all(cpc_t *cpc, void *arg, void (*action)(void *arg, const char *event))
{
	walk_all(cpc, cpc->generic, arg, action);
}

void cpc_walk_attrs(cpc_t *cpc, void *arg, void (*action)(void *arg, const char *attr))
{
	walk_list(cpc->attrs, action, arg);
}

/* -- sets -------------------------------------------------------------------- */

static int set_valid(cpc_t *cpc, cpc_set_t *set)
{
	cpc_set_t *s;
	sigset_t old;

	cpc_lock(cpc, &old);
	for (s = cpc->sets; s != NULL && s != set; s = s->next)
		;
	cpc_unlock(cpc, &old);
	return s != NULL;
}

cpc_set_t *cpc_set_create(cpc_t *cpc)
{
	cpc_set_t *set;
	sigset_t old;

	if ((set = calloc(1, sizeof *set)) == NULL) {
		errno = ENOMEM;
		return NULL;
	}
	set->state = CS_UNBOUND;
	set->fd = -1;
	set->id = -1;
	cpc_lock(cpc, &old);
	set->next = cpc->sets;
	cpc->sets = set;
	cpc_unlock(cpc, &old);
	return set;
}

int cpc_set_destroy(cpc_t *cpc, cpc_set_t *set)
{
	cpc_set_t **p;
	sigset_t old;

	cpc_lock(cpc, &old);
	for (p = &cpc->sets; *p != NULL && *p != set; p = &(*p)->next)
		;
	if (*p == NULL) {
		cpc_unlock(cpc, &old);
		errno = EINVAL;
		return -1;
	}
	*p = set->next;
	cpc_unlock(cpc, &old);
	if (set->state != CS_UNBOUND)
		(void) cpc_unbind(cpc, set);
	free(set->req);
	free(set);
	return 0;
}

int cpc_set_add_request(cpc_t *cpc, cpc_set_t *set, const char *event,
    uint64_t preset, uint_t flags, uint_t nattrs, const cpc_attr_t *attrs)
{
	const char *fn = "cpc_set_add_request";
	struct request req, *grown;
	uint_t i, pic;

	if (!set_valid(cpc, set) || set->state != CS_UNBOUND || event == NULL) {
		errno = EINVAL;
		return -1;
	}
	for (pic = 0; pic < cpc->npic; pic++)
		if (valid_event(cpc, pic, event))
			break;
	if (pic == cpc->npic || strlen(event) >= HWPERFD_CPC_EVLEN) {
		cpc_err(cpc, fn, CPC_INVALID_EVENT);
		errno = EINVAL;
		return -1;
	}
	if (nattrs > HWPERFD_CPC_MAXATTRS || (nattrs != 0 && attrs == NULL)) {
		cpc_err(cpc, fn, CPC_INVALID_ATTRIBUTE);
		errno = EINVAL;
		return -1;
	}
	memset(&req, 0, sizeof req);
	snprintf(req.event, sizeof req.event, "%s", event);
	req.preset = preset;
	req.flags = flags;
	req.nattrs = nattrs;
	for (i = 0; i < nattrs; i++) {
		if (attrs[i].ca_name == NULL || attrs[i].ca_name[0] == '\0' ||
		    strlen(attrs[i].ca_name) >= CPC_MAX_ATTR_LEN || !in_list(cpc->attrs, attrs[i].ca_name)) {
			cpc_err(cpc, fn, CPC_INVALID_ATTRIBUTE);
			errno = EINVAL;
			return -1;
		}
		if (strcmp(attrs[i].ca_name, "picnum") == 0) {
			if (attrs[i].ca_val >= cpc->npic) {
				cpc_err(cpc, fn, CPC_INVALID_PICNUM);
				errno = EINVAL;
				return -1;
			}
			if (!valid_event(cpc, (uint_t)attrs[i].ca_val, event)) {
				cpc_err(cpc, fn, CPC_PIC_NOT_CAPABLE);
				errno = EINVAL;
				return -1;
			}
		}
		snprintf(req.attr[i].ka_name, sizeof req.attr[i].ka_name, "%s", attrs[i].ca_name);
		req.attr[i].ka_val = attrs[i].ca_val;
	}
	if ((grown = realloc(set->req, (set->nreqs + 1) * sizeof *grown)) == NULL) {
		errno = ENOMEM;
		return -1;
	}
	set->req = grown;
	set->req[set->nreqs] = req;
	return set->nreqs++;
}

void cpc_walk_requests(cpc_t *cpc, cpc_set_t *set, void *arg,
    void (*action)(void *arg, int index, const char *event, uint64_t preset,
    uint_t flags, int nattrs, const cpc_attr_t *attrs))
{
	cpc_attr_t attrs[HWPERFD_CPC_MAXATTRS];
	struct request *r;
	int i;
	uint_t j;

	(void) cpc;
	for (i = 0; i < set->nreqs; i++) {
		r = &set->req[i];
		for (j = 0; j < r->nattrs; j++) {
			attrs[j].ca_name = r->attr[j].ka_name;
			attrs[j].ca_val = r->attr[j].ka_val;
		}
		action(arg, i, r->event, r->preset, r->flags, (int)r->nattrs, r->nattrs ? attrs : NULL);
	}
}

/* -- buffers ----------------------------------------------------------------- */

cpc_buf_t *cpc_buf_create(cpc_t *cpc, cpc_set_t *set)
{
	cpc_buf_t *buf;
	sigset_t old;

	if (!set_valid(cpc, set)) {
		errno = EINVAL;
		return NULL;
	}
	if ((buf = calloc(1, sizeof *buf)) == NULL ||
	    (buf->data = calloc(set->nreqs ? set->nreqs : 1, sizeof(uint64_t))) == NULL) {
		free(buf);
		errno = ENOMEM;
		return NULL;
	}
	buf->n = set->nreqs;
	cpc_lock(cpc, &old);
	buf->next = cpc->bufs;
	cpc->bufs = buf;
	cpc_unlock(cpc, &old);
	return buf;
}

int cpc_buf_destroy(cpc_t *cpc, cpc_buf_t *buf)
{
	cpc_buf_t **p;
	sigset_t old;

	cpc_lock(cpc, &old);
	for (p = &cpc->bufs; *p != NULL && *p != buf; p = &(*p)->next)
		;
	if (*p == NULL) {
		cpc_unlock(cpc, &old);
		errno = EINVAL;
		return -1;
	}
	*p = buf->next;
	cpc_unlock(cpc, &old);
	free(buf->data);
	free(buf);
	return 0;
}

void cpc_buf_sub(cpc_t *cpc, cpc_buf_t *ds, cpc_buf_t *a, cpc_buf_t *b)
{
	int i;

	(void) cpc;
	if (a->n != ds->n || b->n != ds->n)
		return;
	ds->hrtime = a->hrtime > b->hrtime ? a->hrtime : b->hrtime;
	ds->tick = a->tick - b->tick;
	for (i = 0; i < ds->n; i++)
		ds->data[i] = a->data[i] - b->data[i];
}

void cpc_buf_add(cpc_t *cpc, cpc_buf_t *ds, cpc_buf_t *a, cpc_buf_t *b)
{
	int i;

	(void) cpc;
	if (a->n != ds->n || b->n != ds->n)
		return;
	ds->hrtime = a->hrtime > b->hrtime ? a->hrtime : b->hrtime;
	ds->tick = a->tick + b->tick;
	for (i = 0; i < ds->n; i++)
		ds->data[i] = a->data[i] + b->data[i];
}

void cpc_buf_copy(cpc_t *cpc, cpc_buf_t *ds, cpc_buf_t *src)
{
	(void) cpc;
	if (ds->n != src->n)
		return;
	memcpy(ds->data, src->data, ds->n * sizeof(uint64_t));
	ds->hrtime = src->hrtime;
	ds->tick = src->tick;
}

void cpc_buf_zero(cpc_t *cpc, cpc_buf_t *buf)
{
	(void) cpc;
	memset(buf->data, 0, buf->n * sizeof(uint64_t));
	buf->hrtime = 0;
	buf->tick = 0;
}

int cpc_buf_get(cpc_t *cpc, cpc_buf_t *buf, int index, uint64_t *val)
{
	(void) cpc;
	if (index < 0 || index >= buf->n) {
		errno = EINVAL;
		return -1;
	}
	*val = buf->data[index];
	return 0;
}

int cpc_buf_set(cpc_t *cpc, cpc_buf_t *buf, int index, uint64_t val)
{
	(void) cpc;
	if (index < 0 || index >= buf->n) {
		errno = EINVAL;
		return -1;
	}
	buf->data[index] = val;
	return 0;
}

hrtime_t cpc_buf_hrtime(cpc_t *cpc, cpc_buf_t *buf)
{
	(void) cpc;
	return buf->hrtime;
}

uint64_t cpc_buf_tick(cpc_t *cpc, cpc_buf_t *buf)
{
	(void) cpc;
	return buf->tick;
}

/* -- binding ----------------------------------------------------------------- */

static int pack(cpc_t *cpc, cpc_set_t *set, uint_t flags, struct hwperfd_cpc_io *io, const char *fn)
{
	memset(io, 0, sizeof *io);
	if (set->nreqs > HWPERFD_CPC_MAXREQS) {
		cpc_err(cpc, fn, CPC_RESOURCE_UNAVAIL);
		errno = EINVAL;
		return -1;
	}
	io->ci_flags = flags;
	io->ci_nreqs = (uint32_t)set->nreqs;
	memcpy(io->ci_req, set->req, set->nreqs * sizeof set->req[0]);
	return 0;
}

/* The page of the set just bound (on the calling LWP through the handle's
 * file, on a CPU through the file that holds it), and the binding it shows. */
static void map_page(int fd, cpc_set_t *set)
{
	int saved = errno;

	set->page_tried = 1;
	if (hwperfd_state_open(fd, &set->page) == 0) {
		set->serial = __atomic_load_n(&set->page.page->hs_generation, __ATOMIC_ACQUIRE);
		/* any thread may sample a CPU's set: its page is never unmapped under them */
		set->page.shared = set->state == CS_BOUND_CPU;
	}
	errno = saved;
}

/* A sample from the set's page: 0, or -1 to ask the daemon. */
static int sample_page(cpc_set_t *set, cpc_buf_t *buf)
{
	uint64_t counts[1 + HWPERFD_CPC_MAXREQS], now;
	int generation, i, saved = errno;

	if (set->page.page == NULL || (set->state == CS_BOUND_CURLWP && self_tid() != set->thr))
		return -1;
	if (hwperfd_state_read_cpu(&set->page, &generation, counts, 1 + (unsigned)set->nreqs, NULL, &now) < 0
	    || generation != set->serial) {
		if (set->page.page == NULL)	/* the daemon let it go: try its successor's once */
			set->page_tried = 0;
		errno = saved;
		return -1;
	}
	for (i = 0; i < set->nreqs; i++)
		buf->data[i] = counts[1 + i];
	buf->tick = counts[0];
	buf->hrtime = (hrtime_t)now;
	return 0;
}

int cpc_bind_curlwp(cpc_t *cpc, cpc_set_t *set, uint_t flags)
{
	struct hwperfd_cpc_io io;
	unsigned gen;
	enum cs_state old_state;
	pid_t old_thr;

	/* EINVAL: "the set was not created with this cpc handle" (ERRORS) */
	if (!CPC_SET_VALID_FLAGS(flags) || !set_valid(cpc, set) || set->nreqs <= 0) {
		errno = EINVAL;
		return -1;
	}
	if (pack(cpc, set, flags, &io, "cpc_bind_curlwp") < 0)
		return -1;
	io.ci_target = HWPERFD_CPC_LWP;
	ovf_timed(&io);
	ovf_hold();
	gen = ovf_self.gen;
	/*
	 * The set is bound, as the program's handler sees it, before the call:
	 * a set preset a few events short of its overflow overflows as the
	 * call returns, and its SIGEMT can come before cpc_bind_curlwp does.
	 * Bound only after, the carrier found no bound set and was dropped
	 * (the set then stayed frozen for good), or the handler's
	 * cpc_set_sample answered EINVAL.  Until the call answers, samples ask
	 * the daemon (no page yet).  A refused bind puts the set back.
	 */
	old_state = set->state;
	old_thr = set->thr;
	hwperfd_state_close(&set->page);
	set->thr = self_tid();
	set->state = CS_BOUND_CURLWP;
	if (old_state == CS_UNBOUND)
		__sync_fetch_and_add(&bound_sets, 1);
	if (cpc_call(cpc, cpc->fd, HWPERFD_CPCIO_BIND, &io, "cpc_bind_curlwp") < 0) {
		if (old_state == CS_UNBOUND)
			__sync_fetch_and_sub(&bound_sets, 1);
		set->state = old_state;
		set->thr = old_thr;
		return -1;
	}
	ovf_took(cpc->fd, gen, &io);
	map_page(cpc->fd, set);
	return 0;
}

int cpc_bind_pctx(cpc_t *cpc, pctx_t *pctx, id_t id, cpc_set_t *set, uint_t flags)
{
	struct hwperfd_cpc_io io;

	if (flags != 0 || pctx == NULL || !set_valid(cpc, set) || set->nreqs <= 0) {
		errno = EINVAL;
		return -1;
	}
	if (pack(cpc, set, flags, &io, "cpc_bind_pctx") < 0)
		return -1;
	io.ci_target = HWPERFD_CPC_PCTX;
	io.ci_pid = pctx->pid;
	io.ci_id = id;
	if (cpc_call(cpc, cpc->fd, HWPERFD_CPCIO_BIND, &io, "cpc_bind_pctx") < 0)
		return -1;
	if (set->state == CS_UNBOUND)
		__sync_fetch_and_add(&bound_sets, 1);
	set->pid = pctx->pid;
	set->id = id;
	set->state = CS_BOUND_PCTX;
	return 0;
}

/*
 * processor_bind(2) for emulated CPU id: the calling thread goes to host
 * CPU id modulo the host's CPUs (the daemon's CPUs need not be the host's).
 */
static int processor_bind(cpc_t *cpc, processorid_t id, cpu_set_t *old)
{
	cpu_set_t one;
	long host = sysconf(_SC_NPROCESSORS_CONF);

	if (id < 0 || id >= cpc->ncpus) {
		errno = EINVAL;
		return -1;
	}
	if (host < 1)
		host = 1;
	if (sched_getaffinity(0, sizeof *old, old) < 0)
		return -1;
	CPU_ZERO(&one);
	CPU_SET((int)(id % host), &one);
	if (sched_setaffinity(0, sizeof one, &one) < 0 && errno != EINVAL)
		return -1;
	return 0;
}

int cpc_bind_cpu(cpc_t *cpc, processorid_t id, cpc_set_t *set, uint_t flags)
{
	const char *fn = "cpc_bind_cpu";
	struct hwperfd_cpc_io io;
	int fd, error;

	if (flags != 0 || !set_valid(cpc, set) || set->nreqs <= 0) {
		errno = EINVAL;
		return -1;
	}
	if (processor_bind(cpc, id, &set->obind) < 0) {
		error = errno;
		cpc_err(cpc, fn, CPC_PBIND_FAILED);
		errno = error;
		return -1;
	}
	if ((fd = open_node()) < 0) {
		error = errno;
		(void) sched_setaffinity(0, sizeof set->obind, &set->obind);
		errno = error;
		return -1;
	}
	if (pack(cpc, set, flags, &io, fn) < 0) {
		error = errno;
		close(fd);
		(void) sched_setaffinity(0, sizeof set->obind, &set->obind);
		errno = error;
		return -1;
	}
	io.ci_target = HWPERFD_CPC_CPU;
	io.ci_id = id;
	if (cpc_call(cpc, fd, HWPERFD_CPCIO_BIND, &io, fn) < 0) {
		error = errno;
		close(fd);
		(void) sched_setaffinity(0, sizeof set->obind, &set->obind);
		errno = error;
		return -1;
	}
	if (set->fd >= 0)
		close(set->fd);
	set->fd = fd;
	if (set->state == CS_UNBOUND)
		__sync_fetch_and_add(&bound_sets, 1);
	set->cpu = id;
	set->thr = (pid_t)syscall(SYS_gettid);
	set->state = CS_BOUND_CPU;
	hwperfd_state_close(&set->page);
	map_page(set->fd, set);
	return 0;
}

static int lwp_call(cpc_t *cpc, unsigned long cmd, int index, uint64_t preset)
{
	struct hwperfd_cpc_io io;

	memset(&io, 0, HWPERFD_CPC_HEAD_SIZE);	/* a head-only call */
	io.ci_target = HWPERFD_CPC_LWP;
	io.ci_index = index;
	io.ci_preset = preset;
	return cpc_call(cpc, cpc->fd, cmd, &io, NULL);
}

int cpc_request_preset(cpc_t *cpc, int index, uint64_t preset)
{
	return lwp_call(cpc, HWPERFD_CPCIO_PRESET, index, preset);
}

int cpc_set_restart(cpc_t *cpc, cpc_set_t *set)
{
	struct hwperfd_cpc_io io;
	unsigned gen;

	(void) set;
	memset(&io, 0, HWPERFD_CPC_HEAD_SIZE);	/* a head-only call */
	io.ci_target = HWPERFD_CPC_LWP;
	ovf_timed(&io);
	ovf_hold();
	gen = ovf_self.gen;
	/* The set starts again where the LWP's clock stands as it calls, not a
	   round trip of its CPU time later, where the daemon looks. */
	io.ci_hrtime = ovf_clock(CLOCK_THREAD_CPUTIME_ID);
	if (cpc_call(cpc, cpc->fd, HWPERFD_CPCIO_RESTART, &io, NULL) < 0)
		return -1;
	ovf_took(cpc->fd, gen, &io);
	return 0;
}

int cpc_enable(cpc_t *cpc)
{
	return lwp_call(cpc, HWPERFD_CPCIO_ENABLE, 0, 0);
}

int cpc_disable(cpc_t *cpc)
{
	return lwp_call(cpc, HWPERFD_CPCIO_DISABLE, 0, 0);
}

static void hold_signals(sigset_t *old)
{
	sigset_t block;

	sigemptyset(&block);
	sigaddset(&block, SIGEMT);
	sigaddset(&block, HWPERFD_CPC_SIGCARRIER);
	pthread_sigmask(SIG_BLOCK, &block, old);
}

int cpc_unbind(cpc_t *cpc, cpc_set_t *set)
{
	sigset_t old;
	int ret;

	/* an overflow signal on its way finds the set unbound, and is dropped */
	hold_signals(&old);
	ret = unbind(cpc, set);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return ret;
}

static int unbind(cpc_t *cpc, cpc_set_t *set)
{
	struct hwperfd_cpc_io io;
	int ret = 0, error = 0;

	if (!set_valid(cpc, set)) {
		errno = EINVAL;
		return -1;
	}
	memset(&io, 0, HWPERFD_CPC_HEAD_SIZE);	/* a head-only call */
	switch (set->state) {
	case CS_UNBOUND:
		errno = EINVAL;
		return -1;
	case CS_BOUND_CURLWP:
		io.ci_target = HWPERFD_CPC_LWP;
		ovf_disarm();
		ret = cpc_call(cpc, cpc->fd, HWPERFD_CPCIO_RELE, &io, NULL);
		error = errno;
		break;
	case CS_BOUND_CPU:
		io.ci_target = HWPERFD_CPC_CPU;
		io.ci_id = set->cpu;
		ret = cpc_call(cpc, set->fd, HWPERFD_CPCIO_RELE, &io, NULL);
		error = errno;
		close(set->fd);
		set->fd = -1;
		(void) sched_setaffinity(0, sizeof set->obind, &set->obind);
		break;
	case CS_BOUND_PCTX:
		io.ci_target = HWPERFD_CPC_PCTX;
		io.ci_pid = set->pid;
		io.ci_id = set->id;
		ret = cpc_call(cpc, cpc->fd, HWPERFD_CPCIO_RELE, &io, NULL);
		error = errno;
		break;
	}
	__sync_fetch_and_sub(&bound_sets, 1);
	hwperfd_state_close(&set->page);
	set->thr = 0;
	set->id = -1;
	set->state = CS_UNBOUND;
	if (ret != 0)
		errno = error;
	return ret;
}

int cpc_set_sample(cpc_t *cpc, cpc_set_t *set, cpc_buf_t *buf)
{
	struct hwperfd_cpc_io io;
	int fd = cpc->fd;
	unsigned gen;

	if (set->state == CS_UNBOUND || buf->n != set->nreqs) {
		errno = EINVAL;
		return -1;
	}
	memset(&io, 0, HWPERFD_CPC_HEAD_SIZE);	/* a head-only call */
	switch (set->state) {
	case CS_BOUND_CURLWP:
		if (sample_page(set, buf) == 0)
			return 0;
		io.ci_target = HWPERFD_CPC_LWP;
		ovf_timed(&io);
		break;
	case CS_BOUND_CPU:
		if (sample_page(set, buf) == 0)
			return 0;
		io.ci_target = HWPERFD_CPC_CPU;
		io.ci_id = set->cpu;
		fd = set->fd;
		break;
	case CS_BOUND_PCTX:
		io.ci_target = HWPERFD_CPC_PCTX;
		io.ci_pid = set->pid;
		io.ci_id = set->id;
		break;
	default:
		errno = EINVAL;
		return -1;
	}
	gen = ovf_self.gen;
	if (cpc_call(cpc, fd, HWPERFD_CPCIO_SAMPLE, &io, NULL) < 0)
		return -1;
	if (set->state == CS_BOUND_CURLWP)
		ovf_took(fd, gen, &io);
	if ((int)io.ci_nreqs != set->nreqs) {
		/* another set was bound to the LWP since: this one is gone */
		errno = EINVAL;
		return -1;
	}
	memcpy(buf->data, io.ci_data, buf->n * sizeof(uint64_t));
	buf->hrtime = io.ci_hrtime;
	buf->tick = io.ci_tick;
	if (set->state == CS_BOUND_CURLWP && set->page.page == NULL && !set->page_tried && self_tid() == set->thr)
		map_page(cpc->fd, set);
	return 0;
}

/* -- libpctx: a handle on another process ----------------------------------- */

pctx_t *pctx_capture(pid_t pid, void *arg, int verbose, pctx_errfn_t *errfn)
{
	pctx_t *pctx;

	(void) arg;
	(void) verbose;
	(void) errfn;
	if (pid <= 0 || (kill(pid, 0) < 0 && errno == ESRCH)) {
		errno = ESRCH;
		return NULL;
	}
	if ((pctx = calloc(1, sizeof *pctx)) == NULL) {
		errno = ENOMEM;
		return NULL;
	}
	pctx->pid = pid;
	return pctx;
}

void pctx_release(pctx_t *pctx)
{
	free(pctx);
}
