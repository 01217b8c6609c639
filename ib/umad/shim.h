// shim.h declares the libc helpers of package umad (shim.c).
#ifndef SRPT_UMAD_SHIM_H
#define SRPT_UMAD_SHIM_H

#include <stdint.h>

#define SRPT_UMAD_HDR_SIZE 56

int srpt_umad_read_file(const char *path, char *buf, int max);
int srpt_umad_list_dir(const char *path, char *buf, int max);
int srpt_umad_open(const char *path);
int srpt_umad_register(int fd, int mgmt_class, int version, const uint8_t *methods, int nmethods);
int srpt_umad_recv(int fd, uint8_t *buf, int len, int timeout_ms);
int srpt_umad_send(int fd, const uint8_t *buf, int len);
void srpt_umad_close(int fd);

#endif
