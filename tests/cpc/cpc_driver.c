/*
 * A libcpc client driven line by line from stdin, so tests can interleave
 * its calls with the manual clock.  Each command prints one line: "ok ...",
 * or "err ERRNO_NAME" after a failed call (the error handler prints
 * "handler FN SUBCODE MESSAGE" lines of its own when installed).
 *
 *   tid                          the calling thread's id
 *   handler                      install an error handler that prints
 *   add EVENT PRESET FLAGS [NAME=VAL ...]
 *   bind [FLAGS]                 cpc_bind_curlwp
 *   bindcpu CPU                  cpc_bind_cpu
 *   bindpctx PID LWP             cpc_bind_pctx
 *   sample                       cpc_set_sample: "ok V0 V1 ... tick T"
 *   preset INDEX VALUE           cpc_request_preset
 *   restart | unbind | enable | disable | newset
 *   reopen                       later calls go through a second cpc_open
 *                                handle; the set stays the first one's
 *   emt                          catch SIGEMT: count overflows, print each
 *   overflows                    "ok N" - SIGEMTs taken so far
 *   walk                         the model: npic, caps, names, events, attrs
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <libcpc.h>

static cpc_t *cpc;
static cpc_set_t *set;
static cpc_buf_t *buf;
static volatile sig_atomic_t overflows, last_code, last_signo;
static volatile sig_atomic_t restart_in_handler;

static const char *ename(int e)
{
	switch (e) {
	case EINVAL: return "EINVAL";
	case EAGAIN: return "EAGAIN";
	case EACCES: return "EACCES";
	case ENOTSUP: return "ENOTSUP";
	case ESRCH: return "ESRCH";
	case ENOSYS: return "ENOSYS";
	case ENOENT: return "ENOENT";
	default: return strerror(e);
	}
}

static void handler(const char *fn, int subcode, const char *fmt, va_list ap)
{
	char msg[256];

	vsnprintf(msg, sizeof msg, fmt, ap);
	msg[strcspn(msg, "\n")] = '\0';
	printf("handler %s %d %s\n", fn, subcode, msg);
}

static void emt(int sig, siginfo_t *si, void *uc)
{
	(void) uc;
	last_signo = sig;
	last_code = si->si_code;
	overflows++;
	if (restart_in_handler)
		(void) cpc_set_restart(cpc, set);
}

static void pic_name(void *arg, uint_t pic, const char *name)
{
	(void) arg;
	printf(" %u:%s", pic, name);
}

static void any_name(void *arg, const char *name)
{
	printf(" %s%s", (const char *)arg, name);
}

static int fail(void)
{
	printf("err %s\n", ename(errno));
	return 0;
}

int main(void)
{
	char line[1024];
	uint_t i;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if ((cpc = cpc_open(CPC_VER_CURRENT)) == NULL) {
		printf("err %s\n", ename(errno));
		return 1;
	}
	set = cpc_set_create(cpc);
	printf("ready %d\n", _lwp_self());
	while (fgets(line, sizeof line, stdin) != NULL) {
		char *argv[16];
		int argc = 0;
		char *p = strtok(line, " \n");

		while (p != NULL && argc < 16) {
			argv[argc++] = p;
			p = strtok(NULL, " \n");
		}
		if (argc == 0)
			continue;
		if (strcmp(argv[0], "tid") == 0) {
			printf("ok %d\n", _lwp_self());
		} else if (strcmp(argv[0], "handler") == 0) {
			cpc_seterrhndlr(cpc, handler);
			printf("ok\n");
		} else if (strcmp(argv[0], "add") == 0 && argc >= 4) {
			cpc_attr_t attrs[8];
			int n = 0, index;

			for (int a = 4; a < argc && n < 8; a++, n++) {
				char *eq = strchr(argv[a], '=');
				if (eq != NULL)
					*eq++ = '\0';
				attrs[n].ca_name = argv[a];
				attrs[n].ca_val = eq ? strtoull(eq, NULL, 0) : 0;
			}
			index = cpc_set_add_request(cpc, set, argv[1], strtoull(argv[2], NULL, 0),
			    (uint_t)strtoul(argv[3], NULL, 0), (uint_t)n, n ? attrs : NULL);
			if (index < 0) {
				fail();
				continue;
			}
			printf("ok %d\n", index);
		} else if (strcmp(argv[0], "bind") == 0) {
			uint_t flags = argc > 1 ? (uint_t)strtoul(argv[1], NULL, 0) : 0;
			if (cpc_bind_curlwp(cpc, set, flags) < 0) {
				fail();
				continue;
			}
			printf("ok\n");
		} else if (strcmp(argv[0], "bindcpu") == 0 && argc == 2) {
			if (cpc_bind_cpu(cpc, atoi(argv[1]), set, 0) < 0) {
				fail();
				continue;
			}
			printf("ok\n");
		} else if (strcmp(argv[0], "bindpctx") == 0 && argc == 3) {
			pctx_t *pctx = pctx_capture(atoi(argv[1]), NULL, 0, NULL);
			if (pctx == NULL || cpc_bind_pctx(cpc, pctx, atoi(argv[2]), set, 0) < 0) {
				fail();
				continue;
			}
			printf("ok\n");
		} else if (strcmp(argv[0], "sample") == 0) {
			uint64_t v;
			if (buf == NULL)
				buf = cpc_buf_create(cpc, set);
			if (cpc_set_sample(cpc, set, buf) < 0) {
				fail();
				continue;
			}
			printf("ok");
			for (int k = 0; cpc_buf_get(cpc, buf, k, &v) == 0; k++)
				printf(" %" PRIu64, v);
			printf(" tick %" PRIu64 "\n", cpc_buf_tick(cpc, buf));
		} else if (strcmp(argv[0], "preset") == 0 && argc == 3) {
			if (cpc_request_preset(cpc, atoi(argv[1]), strtoull(argv[2], NULL, 0)) < 0) {
				fail();
				continue;
			}
			printf("ok\n");
		} else if (strcmp(argv[0], "restart") == 0) {
			if (cpc_set_restart(cpc, set) < 0) {
				fail();
				continue;
			}
			printf("ok\n");
		} else if (strcmp(argv[0], "unbind") == 0) {
			if (cpc_unbind(cpc, set) < 0) {
				fail();
				continue;
			}
			printf("ok\n");
		} else if (strcmp(argv[0], "enable") == 0 || strcmp(argv[0], "disable") == 0) {
			if ((argv[0][0] == 'e' ? cpc_enable(cpc) : cpc_disable(cpc)) < 0) {
				fail();
				continue;
			}
			printf("ok\n");
		} else if (strcmp(argv[0], "reopen") == 0) {
			cpc_t *other = cpc_open(CPC_VER_CURRENT);

			if (other == NULL) {
				fail();
				continue;
			}
			cpc = other;  /* the first handle stays open: it owns the set */
			printf("ok\n");
		} else if (strcmp(argv[0], "newset") == 0) {
			if (buf != NULL)
				cpc_buf_destroy(cpc, buf);
			buf = NULL;
			cpc_set_destroy(cpc, set);
			set = cpc_set_create(cpc);
			printf("ok\n");
		} else if (strcmp(argv[0], "emt") == 0) {
			struct sigaction act;

			memset(&act, 0, sizeof act);
			act.sa_sigaction = emt;
			act.sa_flags = SA_RESTART | SA_SIGINFO;
			restart_in_handler = argc > 1;
			if (sigaction(SIGEMT, &act, NULL) < 0) {
				fail();
				continue;
			}
			printf("ok\n");
		} else if (strcmp(argv[0], "overflows") == 0) {
			printf("ok %d signo %d code %d\n", (int)overflows, (int)last_signo, (int)last_code);
		} else if (strcmp(argv[0], "walk") == 0) {
			printf("ok npic %u caps %u cciname %s\n", cpc_npic(cpc), cpc_caps(cpc), cpc_cciname(cpc));
			for (i = 0; i < cpc_npic(cpc); i++) {
				printf("pic%u", i);
				cpc_walk_events_pic(cpc, i, NULL, pic_name);
				printf("\ngeneric%u", i);
				cpc_walk_generic_events_pic(cpc, i, NULL, pic_name);
				printf("\n");
			}
			printf("all");
			cpc_walk_events_all(cpc, "", any_name);
			printf("\ngenericall");
			cpc_walk_generic_events_all(cpc, "", any_name);
			printf("\nattrs");
			cpc_walk_attrs(cpc, "", any_name);
			printf("\ncpuref %s\nend\n", cpc_cpuref(cpc));
		} else {
			printf("err usage\n");
		}
	}
	cpc_close(cpc);
	return 0;
}
