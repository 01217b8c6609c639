//go:build linux && cgo

// shim.c: the libc calls of package umad. They go through libc, not Go's raw system calls, so
// that umad2sim (ibsim's LD_PRELOAD library, which replaces open, read, write, poll, ioctl and
// opendir) can stand in for the kernel's ib_umad in tests. Functions return 0 or a
// non-negative result, or -errno.

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <rdma/ib_user_mad.h>
#include "shim.h"

// struct ib_user_mad_hdr_old as hdr.go reads and writes it: the layout of a umad file on
// which IB_USER_MAD_ENABLE_PKEY was not called, which is also the one umad2sim uses for a
// process that does not call libibumad's umad_open_port (libibumad's umad_get_mad picks the
// layout from a flag that call sets).
_Static_assert(sizeof(struct ib_user_mad_hdr_old) == SRPT_UMAD_HDR_SIZE, "ib_user_mad_hdr_old size");
_Static_assert(offsetof(struct ib_user_mad_hdr_old, qpn) == 20, "qpn");
_Static_assert(offsetof(struct ib_user_mad_hdr_old, lid) == 28, "lid");
_Static_assert(offsetof(struct ib_user_mad_hdr_old, gid) == 36, "gid");
_Static_assert(offsetof(struct ib_user_mad_hdr_old, flow_label) == 52, "flow_label");

static int neg_errno(void)
{
	return errno ? -errno : -EIO;
}

int srpt_umad_read_file(const char *path, char *buf, int max)
{
	int fd, n;

	errno = 0;
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return neg_errno();
	n = read(fd, buf, max - 1);
	if (n < 0)
		n = neg_errno();
	else
		buf[n] = 0;
	close(fd);
	return n;
}

int srpt_umad_list_dir(const char *path, char *buf, int max)
{
	DIR *d;
	struct dirent *e;
	int n = 0;

	errno = 0;
	d = opendir(path);
	if (!d)
		return neg_errno();
	while ((e = readdir(d)) != NULL) {
		int l = strlen(e->d_name);

		if (e->d_name[0] == '.')
			continue;
		if (n + l + 1 >= max)
			break;
		memcpy(buf + n, e->d_name, l);
		buf[n + l] = '\n';
		n += l + 1;
	}
	closedir(d);
	buf[n] = 0;
	return n;
}

int srpt_umad_open(const char *path)
{
	int fd;

	errno = 0;
	fd = open(path, O_RDWR | O_CLOEXEC);
	return fd < 0 ? neg_errno() : fd;
}

int srpt_umad_register(int fd, int mgmt_class, int version, const uint8_t *methods, int nmethods)
{
	struct ib_user_mad_reg_req req;
	const int bits = 8 * sizeof(long);
	int i;

	memset(&req, 0, sizeof(req));
	req.qpn = 1; // GSI
	req.mgmt_class = mgmt_class;
	req.mgmt_class_version = version;
	for (i = 0; i < nmethods; i++)
		req.method_mask[methods[i] / bits] |= 1UL << (methods[i] % bits);
	errno = 0;
	if (ioctl(fd, IB_USER_MAD_REGISTER_AGENT, &req) < 0)
		return neg_errno();
	return req.id;
}

int srpt_umad_recv(int fd, uint8_t *buf, int len, int timeout_ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	int n;

	errno = 0;
	n = poll(&p, 1, timeout_ms);
	if (n < 0)
		return neg_errno();
	if (n == 0)
		return -ETIMEDOUT;
	n = read(fd, buf, len);
	return n < 0 ? neg_errno() : n;
}

int srpt_umad_send(int fd, const uint8_t *buf, int len)
{
	int n;

	errno = 0;
	n = write(fd, buf, len);
	return n < 0 ? neg_errno() : n;
}

void srpt_umad_close(int fd)
{
	close(fd);
}
