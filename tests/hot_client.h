/*
 * What the test clients that read state pages share (tests/pctr/hot_reads.c,
 * tests/cpc/hot_samples.c; driven by tests/hot_client.py): one command per
 * line on stdin, each answered with one line, after a first "ready".  Every
 * client answers
 *
 *   m       "maps n=N PATH": the live state pages mapped (/proc/self/maps), the last one's path
 *   f       fork; the child makes the client's own read, tagged "child", and exits
 *   q       exit
 *
 * and its own commands besides (hot_serve's ``own``).
 */
#ifndef HOT_CLIENT_H
#define HOT_CLIENT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* <mount>/NODE, the mount from HWPERFD_MOUNT as the libraries take it. */
static void hot_node_path(char *path, size_t size, const char *node)
{
	const char *mount = getenv("HWPERFD_MOUNT");

	snprintf(path, size, "%s/%s", mount ? mount : "/run/hwperfd", node);
}

static void hot_maps(void)
{
	char maps[512], last[512] = "-";
	const char *slash;
	FILE *f;
	int n = 0;

	if ((f = fopen("/proc/self/maps", "r")) != NULL) {
		while (fgets(maps, sizeof maps, f) != NULL)
			if (strstr(maps, "hwperfd-state") != NULL && strstr(maps, "(deleted)") == NULL) {
				n++;
				maps[strcspn(maps, "\n")] = '\0';
				if ((slash = strchr(maps, '/')) != NULL)
					snprintf(last, sizeof last, "%s", slash);
			}
		fclose(f);
	}
	printf("maps n=%d %s\n", n, last);
	fflush(stdout);
}

/* The command loop: m, f and q here, any other line to ``own``. */
static int hot_serve(void (*own)(const char *line), void (*child_read)(const char *tag))
{
	char line[64];
	pid_t child;

	printf("ready\n");
	fflush(stdout);
	while (fgets(line, sizeof line, stdin) != NULL) {
		switch (line[0]) {
		case 'm':
			hot_maps();
			break;
		case 'f':
			child = fork();
			if (child == 0) {
				child_read("child");
				_exit(0);
			}
			waitpid(child, NULL, 0);
			break;
		case 'q':
			return 0;
		default:
			own(line);
		}
	}
	return 0;
}

#endif
