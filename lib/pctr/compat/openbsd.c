/*
 * libopenbsd-compat: what OpenBSD's pctr(1) needs of its libc besides
 * <machine/pctr.h>.
 *
 * sysctl(3) answers the machine and CPU queries from the emulated machine
 * (reading <mount>/pctr: "machine", "vendor", "description", "cpus"):
 * HW_MACHINE, HW_MODEL, HW_NCPU, CPU_CPUVENDOR, CPU_CPUID (a CPUID leaf-1
 * signature: family 6 model 15 for Intel, family 15 for AMD) and
 * CPU_CPUFEATURE (TSC and MSR present).  Anything else, or setting a value:
 * EOPNOTSUPP, as OpenBSD answers names it does not know.
 *
 * strtonum(3): OpenBSD's contract - the value, or 0 with *errstr set to
 * "invalid", "too small" or "too large" (errno EINVAL or ERANGE).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysctl.h>
#include <machine/cpu.h>
#include <machine/specialreg.h>

static int machine_field(const char *key, char *out, size_t size)
{
    char path[4096], line[256];
    const char *mount = getenv("HWPERFD_MOUNT");
    size_t keylen = strlen(key);
    FILE *f;
    int found = -1;

    if (mount == NULL || *mount == '\0')
        mount = "/run/hwperfd";
    if (snprintf(path, sizeof path, "%s/pctr", mount) >= (int)sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    if ((f = fopen(path, "re")) == NULL)
        return -1;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, key, keylen) == 0 && line[keylen] == ' ') {
            line[strcspn(line, "\n")] = '\0';
            snprintf(out, size, "%s", line + keylen + 1);
            found = 0;
            break;
        }
    }
    fclose(f);
    if (found < 0)
        errno = ENOENT;
    return found;
}

static int answer(void *oldp, size_t *oldlenp, const void *value, size_t len)
{
    if (oldp == NULL) {
        *oldlenp = len;
        return 0;
    }
    if (*oldlenp < len) {
        memcpy(oldp, value, *oldlenp);
        errno = ENOMEM;
        return -1;
    }
    memcpy(oldp, value, len);
    *oldlenp = len;
    return 0;
}

int sysctl(const int *name, unsigned int namelen, void *oldp, size_t *oldlenp, void *newp, size_t newlen)
{
    char text[128];
    int value;

    if (newp != NULL || newlen != 0 || namelen != 2 || oldlenp == NULL) {
        errno = EOPNOTSUPP;
        return -1;
    }
    if (name[0] == CTL_HW && (name[1] == HW_MACHINE || name[1] == HW_MODEL)) {
        if (machine_field(name[1] == HW_MACHINE ? "machine" : "description", text, sizeof text) < 0)
            return -1;
        return answer(oldp, oldlenp, text, strlen(text) + 1);
    }
    if (name[0] == CTL_HW && name[1] == HW_NCPU) {
        if (machine_field("cpus", text, sizeof text) < 0)
            return -1;
        value = atoi(text);
        return answer(oldp, oldlenp, &value, sizeof value);
    }
    if (name[0] == CTL_MACHDEP && name[1] == CPU_CPUVENDOR) {
        if (machine_field("vendor", text, sizeof text) < 0)
            return -1;
        return answer(oldp, oldlenp, text, strlen(text) + 1);
    }
    if (name[0] == CTL_MACHDEP && name[1] == CPU_CPUID) {
        if (machine_field("vendor", text, sizeof text) < 0)
            return -1;
        value = strcmp(text, "AuthenticAMD") == 0 ? 0x00000f50 : 0x000006f0;
        return answer(oldp, oldlenp, &value, sizeof value);
    }
    if (name[0] == CTL_MACHDEP && name[1] == CPU_CPUFEATURE) {
        value = CPUID_TSC | CPUID_MSR;
        return answer(oldp, oldlenp, &value, sizeof value);
    }
    errno = EOPNOTSUPP;
    return -1;
}

long long strtonum(const char *text, long long low, long long high, const char **errstr)
{
    char *end;
    long long value;
    int saved = errno;

    *errstr = NULL;
    if (low > high) {
        *errstr = "invalid";
        errno = EINVAL;
        return 0;
    }
    errno = 0;
    value = strtoll(text, &end, 10);
    if (text == end || *end != '\0') {
        *errstr = "invalid";
        errno = EINVAL;
        return 0;
    }
    if ((value == LLONG_MIN && errno == ERANGE) || value < low) {
        *errstr = "too small";
        errno = ERANGE;
        return 0;
    }
    if ((value == LLONG_MAX && errno == ERANGE) || value > high) {
        *errstr = "too large";
        errno = ERANGE;
        return 0;
    }
    errno = saved;
    return value;
}
