/*
 * error.c - error codes, their fixed texts and names, and asp_free.
 */
#include "common.h"

static const struct {
	int code;
	const char *name;
	const char *text;
} errors[] = {
	{ ASP_OK, "ASP_OK", "success" },
	{ ASP_ERROR, "ASP_ERROR", "error" },
	{ ASP_EINVAL, "ASP_EINVAL", "invalid argument" },
	{ ASP_ENOMEM, "ASP_ENOMEM", "out of memory" },
	{ ASP_ENOCONFIG, "ASP_ENOCONFIG", "no .asp.json found" },
	{ ASP_ECONFIG, "ASP_ECONFIG", "invalid configuration" },
	{ ASP_EHOSTKEY, "ASP_EHOSTKEY", "host key verification failed" },
	{ ASP_EAUTH, "ASP_EAUTH", "authentication failed" },
	{ ASP_ECONNECT, "ASP_ECONNECT", "could not connect" },
	{ ASP_ECONNLOST, "ASP_ECONNLOST", "connection lost" },
	{ ASP_ETIMEOUT, "ASP_ETIMEOUT", "timed out" },
	{ ASP_ECANCELLED, "ASP_ECANCELLED", "cancelled" },
	{ ASP_ENOENT, "ASP_ENOENT", "no such file or directory" },
	{ ASP_EISDIR, "ASP_EISDIR", "is a directory" },
	{ ASP_EACCES, "ASP_EACCES", "permission denied" },
	{ ASP_EEXIST, "ASP_EEXIST", "file exists" },
	{ ASP_ENOTDIR, "ASP_ENOTDIR", "not a directory" },
	{ ASP_ENOTEMPTY, "ASP_ENOTEMPTY", "directory not empty" },
	{ ASP_ENOSPC, "ASP_ENOSPC", "no space left on device" },
	{ ASP_EPROTO, "ASP_EPROTO", "protocol error" },
	{ ASP_EIO, "ASP_EIO", "input/output error" },
	{ ASP_ELIMIT, "ASP_ELIMIT", "result exceeds a limit" },
	{ ASP_EROFS, "ASP_EROFS", "read-only file system" },
	{ ASP_EBUSY, "ASP_EBUSY", "no room for another command" },
};

const char *asp_strerror(int code)
{
	size_t i;

	for (i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
		if (errors[i].code == code)
			return errors[i].text;
	return "unknown error";
}

const char *asp_error_name(int code)
{
	size_t i;

	for (i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
		if (errors[i].code == code)
			return errors[i].name;
	return "ASP_UNKNOWN";
}

void asp_free(void *ptr)
{
	asp__free(ptr);
}

const char *asp_version(void)
{
	return ASP_VERSION;
}
