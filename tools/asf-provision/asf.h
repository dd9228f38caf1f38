/*
 * asf.h - asf-provision internals: one header for the tool's small files.
 *
 *   main.c    command line, dispatch
 *   up.c      `up`: keys, files, network, container, firewall, config; rollback
 *   manage.c  `down`, `status`, `list`
 *   verify.c  `verify`: evidence that the sandbox is what `up` promised
 *   podman.c  argv builders and process spawning (fork/execvp, never a shell);
 *             the container engine (podman or docker) and its few differences
 *   kube.c    the Kubernetes backend: manifest, apply, teardown
 *   keys.c    ed25519 host and client keys (ssh-keygen)
 *   egress.c  --egress allow=...: the host-side forward proxy (Squid), its config and lifetime
 *   state.c   the state directory, state.json, small file helpers
 *   report.c  the entries of a teardown report (asf_note)
 *
 * Every function that can fail prints nothing itself unless its comment
 * says so: it returns -1 and leaves a message in the caller's asf_err.
 */
#ifndef ASF_H
#define ASF_H

#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <cJSON.h>

#define ASF_LABEL         "io.libasp.asf"
#define ASF_LABEL_NAME    "io.libasp.asf.name"
#define ASF_LABEL_CLIENT  "io.libasp.asf.client" /* kubernetes: pods that may reach sshd */
#define ASF_LABEL_GROUP   "io.libasp.asf.group"  /* up --count: every sandbox of one call */
#define ASF_PREFIX        "asf-"
#define ASF_SSHD_PORT     2222   /* unprivileged: no CAP_NET_BIND_SERVICE needed */
#define ASF_CTR_WORKSPACE "/workspace"
#define ASF_CTR_ETC       "/etc/asf"
#define ASF_CTR_KIT       "/opt/asf-sshd" /* --image without sshd: the host's, mounted here (image.c) */
#define ASF_USER          "agent"
#define ASF_NFT_TABLE     "asf_egress"
#define ASF_ENGINE_DNS    "127.0.0.11" /* docker's embedded resolver inside a user-defined network */
#define ASF_GATE          ".egress-blocked" /* docker: sshd waits for this file in ASF_CTR_ETC */

/* The capabilities sshd needs as root in the container; why: docs/SECURITY.md. */
#define ASF_CAPS          "CAP_SETGID,CAP_SETUID,CAP_SYS_CHROOT"
#define ASF_CAPS_MASK     0x400c0ULL /* bits 6, 7, 18 */

/* A message for the user; filled by the failing function. */
typedef struct asf_err {
	char msg[1024];
} asf_err;

int asf_fail(asf_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* snprintf that says when it truncated (returns -1); paths here are checked,
 * not trusted to fit. */
int str_fmt(char *out, size_t outlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ------------------------------------------------------------ podman.c */

/* A growable, NULL-terminated argv whose strings it owns. */
typedef struct asf_argv {
	char **v;
	size_t n, cap;
	int oom;
} asf_argv;

void argv_add(asf_argv *a, const char *s);
void argv_addf(asf_argv *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void argv_free(asf_argv *a);
/* The argv as one line for messages and evidence (shell-quoted where needed). */
char *argv_text(char *const *argv);

/* "nsenter --target=PID [--user] --net": the container's netns (rootless: through its userns). */
void netns_argv(asf_argv *a, long pid);

/* What a finished command left. */
typedef struct asf_out {
	int status;   /* exit code; 128+N when killed by signal N; 127 when it could not run */
	char *out;    /* stdout, NUL-terminated */
	char *err;    /* stderr, NUL-terminated */
} asf_out;

void out_free(asf_out *o);

/*
 * Run argv[0] (found through PATH) with argv, no shell; capture both
 * streams; kill it after timeout_s. Returns 0 when it ran (whatever its
 * status), -1 with e set when it could not be started or timed out.
 */
int asf_run(asf_out *o, char *const *argv, int timeout_s, asf_err *e);

/* Absolute path of `prog` in $PATH into out (size outlen); -1 if not found. */
int asf_which(const char *prog, char *out, size_t outlen);

/* The engine's binary (podman or docker), found once per process (absolute path) */
extern char asf_podman[4096];
/* "podman" (default) or "docker": --engine, or the engine recorded in state.json. */
extern char asf_engine[16];
int engine_docker(void);
/* Set the engine; -1 with e set for anything but podman or docker. */
int engine_set(const char *name, asf_err *e);
/* Does the container or network `name` exist (labelled or not)? */
int engine_exists(const char *kind, const char *name);

/* Find the engine and check it answers (`ENGINE version`). */
int podman_ready(asf_err *e);

/*
 * Run `podman ARGS...` (a NULL-terminated list). 0: it exited 0, free o with
 * out_free. -1: it failed (e holds podman's own stderr); nothing to free.
 */
int podman(asf_out *o, asf_err *e, ...) __attribute__((sentinel));
int podman_argv(asf_out *o, asf_argv *a, asf_err *e);

/* One line per labelled object of kind "container"/"network"/"volume" (IDs or names). */
int podman_labelled(char ***out, size_t *n, const char *kind, const char *name, asf_err *e);
void strv_free(char **v, size_t n);

/* ------------------------------------------------------------ keys.c */

/* Generate an ed25519 key pair at path (path.pub too); private key 0600. */
int key_generate(const char *path, const char *comment, asf_err *e);
/* "ssh-ed25519 AAAA..." (no comment) of the public key at pub_path. */
int key_public_line(char *out, size_t outlen, const char *pub_path, asf_err *e);
/* "SHA256:..." of the public key at pub_path. */
int key_fingerprint(char *out, size_t outlen, const char *pub_path, asf_err *e);

/* ------------------------------------------------------------ egress.c */

/* --egress: NULL/"none" -> *allow NULL; "allow=H[:P],..." -> array of "host:port" (port default 443). */
int egress_parse(const char *spec, cJSON **allow, asf_err *e);
/* "host:port" -> host, port. */
void allow_split(const char *entry, char *host, size_t hostlen, int *port);
/* --proxy-hosts FILE, checked ("ADDRESS NAME..." lines) and copied to dest. */
int egress_hosts_copy(const char *path, const char *dest, asf_err *e);
/* Start the proxy of STATE/NAME (dir) on gw; records st.proxy {address, port, config, pid, ...}. */
int egress_proxy_start(const char *dir, const char *name, const cJSON *allow, const char *gw, int have_hosts,
		       cJSON *st, asf_err *e);
/* Stop the proxy of STATE/NAME if one runs (found by its command line); detail says what. */
int egress_teardown(const char *dir, char *detail, size_t n, int *was_running);
/* The pid of the proxy running with config conf, or 0. */
long proxy_find(const char *conf);
/* The TCP addresses pid listens on, "ADDR:PORT,...". */
int proxy_listeners(long pid, char *out, size_t outlen);
/* A copy of the body of "chain NAME" in `nft list table` text (up to the next chain), or NULL. */
char *nft_chain_text(const char *table, const char *name);
/* `nft list table` text: its output and its input chain each hook there with their own policy drop. */
int nft_drops_by_default(const char *table);

/* ------------------------------------------------------------ state.c */

extern char asf_state_root[4096];

/* $ASF_STATE_DIR, --state-dir, /var/lib/asf-provision (root) or $XDG_STATE_HOME/asf-provision. */
int state_root_init(const char *override, asf_err *e);
/* STATE_ROOT/name */
void state_dir(char *out, size_t outlen, const char *name);
int state_exists(const char *name);
/* Load STATE_ROOT/name/state.json (NULL and e set when missing or bad). */
cJSON *state_load(const char *name, asf_err *e);
int state_save(const char *name, const cJSON *st, asf_err *e);
/* Names of every state directory, sorted. */
int state_names(char ***out, size_t *n);
/* rm -rf STATE_ROOT/name, refusing anything else. */
int state_remove(const char *name, asf_err *e);

int name_valid(const char *name);
/*
 * Write a file atomically with mode: a temporary file beside it, created
 * with O_EXCL under a random name, then renamed over path. Nothing that
 * already exists at path or beside it is opened or followed. written (may be
 * NULL) gets the new file's stat (its inode is what path names afterwards).
 */
int write_file(const char *path, const char *data, size_t len, mode_t mode, struct stat *written,
	       asf_err *e);
/*
 * Open a regular file for reading (openat from dirfd, AT_FDCWD for a plain
 * path) the way every file anyone else could have written is opened here:
 * O_NOFOLLOW (a symbolic link is refused, not followed), O_NONBLOCK (a FIFO
 * or device does not block the open), then fstat: anything but a regular
 * file is closed unread. Returns the fd, or -1 with e naming `shown`.
 */
int open_regular(int dirfd, const char *path, const char *shown, struct stat *st, asf_err *e);
/* Read at most max bytes of fd; a longer file is an error, not a truncation. */
char *read_fd(int fd, const char *shown, size_t max, size_t *len, asf_err *e);
/* open_regular + read_fd. NULL with e set on any refusal. */
char *read_file(const char *path, size_t max, size_t *len, asf_err *e);
/* Sizes asf-provision ever expects of the files it reads back. */
#define ASF_STATE_MAX   (1u << 20)   /* state.json */
#define ASF_CONFIG_MAX  (64u << 10)  /* an .asp.json it wrote */
#define ASF_SMALL_MAX   4096u        /* a public key, a probe file */
/* mkdir (existing is fine), then refuse anything but a directory owned by us; chmod mode. */
int mkdir_mode(const char *path, mode_t mode, asf_err *e);
/* chown a directory without following a symlink planted in its place; *before gets its old owner. */
int chown_dir(const char *path, uid_t uid, gid_t gid, struct stat *before, asf_err *e);
/* Small cJSON accessors that tolerate absent fields. */
const char *js(const cJSON *o, const char *key);
double jn(const cJSON *o, const char *key, double dflt);
int jb(const cJSON *o, const char *key);
void iso_time(char *out, size_t outlen);
/* Print a cJSON value to stdout and free the text. */
void print_json(const cJSON *j);

/* ------------------------------------------------------------ commands */

typedef struct asf_up_opts {
	const char *name;
	const char *workspace;   /* HOSTDIR[:ro] */
	const char *image;
	const char *rootfs;
	const char *runtime;     /* NULL: podman's default */
	const char *egress;      /* "none" or "allow=HOST[:PORT],..." */
	const char *proxy_hosts; /* --proxy-hosts FILE: names the egress proxy resolves (no DNS) */
	const char *ingress;     /* "publish" (default) or "exec" */
	const char *memory;      /* e.g. "1g" */
	const char *cpus;        /* e.g. "1" or "0.5" */
	const char *pids;        /* e.g. "512" */
	const char *publish;     /* ADDR[:PORT] */
	const char *out;         /* where the .asp.json goes */
	const char *backend;     /* "container" (default) or "kubernetes" */
	const char *namespace_;  /* kubernetes: default "default" */
	const char *manifest;    /* kubernetes: where the manifest goes (default STATE/NAME/kubernetes.yaml) */
	const char *ws_volume;   /* kubernetes: "hostpath" (--workspace HOSTDIR), "emptydir", "pvc:CLAIM" */
	const char *deadline;    /* --deadline SECONDS: activeDeadlineSeconds / the container's timeout */
	const char *group;       /* up --count: the group label (the base name) */
	int unprivileged;        /* kubernetes: sshd runs as the sandbox user, no capabilities (PSS restricted) */
	unsigned int uid;        /* the sandbox user's uid/gid; 0: up chooses one no host account has */
	int allow_host_uid;      /* --allow-host-account-uid: a uid that is someone's is not refused */
	const char *sshd;        /* --image: "auto" (default), "image" or "host": whose sshd runs (image.c) */
	int manifest_only;       /* `manifest`: write the manifest and the .asp.json, apply nothing */
	int replace;
	int json;
} asf_up_opts;

int cmd_up(const asf_up_opts *o);
/* up --count N: N sandboxes NAME-1..NAME-N (labelled with the group NAME); all or none. */
int cmd_up_many(const asf_up_opts *o, long count, long parallel);
int cmd_down(const char *name, int json);
/* down --group G: every sandbox labelled with the group G (state and engine). */
int cmd_down_group(const char *group, int json);
int cmd_status(const char *name, int json);
int cmd_list(int json);
int cmd_verify(const char *name, const char *report, int json);

/*
 * manage.c: remove everything the sandbox `name` owns - labelled containers,
 * networks and volumes, the workspace's original owner, the .asp.json it
 * wrote, its state directory - then re-scan by label. Appends one
 * {object, name, result[, detail]} per object to report (may be NULL).
 * Returns the number of failures. Used by `down` and by up's rollback.
 */
int teardown(const char *name, cJSON *report);

/* up.c: who on this host has id (an account, the caller, a group, and with subids someone's
 * subordinate ids) into who; 0 when nobody. */
int id_owner(unsigned int id, int subids, char *who, size_t n);
/* The first id up chooses from, and how many it tries (ids no host account has). */
#define ASF_UID_FIRST 1879048192u /* 0x70000000: above systemd's container range, below 2^31 */
#define ASF_UID_COUNT 65536u

/* report.c: one {object, name, result[, detail]} in a `down` report (report may be NULL). */
void asf_note(cJSON *report, const char *object, const char *name, const char *result, const char *detail);

/* ------------------------------------------------------------ kube.c */

/* One sandbox as Kubernetes objects. */
typedef struct asf_kube {
	const char *name;
	const char *namespace_;
	const char *image;
	const char *dir;         /* its state directory: sshd/ holds the Secret's files */
	const char *workspace;   /* host path (hostPath volume) */
	int ws_ro;
	int ws_kind;             /* ASF_WS_HOSTPATH, ASF_WS_EMPTYDIR, ASF_WS_PVC */
	const char *claim;       /* ASF_WS_PVC: the PersistentVolumeClaim */
	int unprivileged;        /* sshd as uid, no capabilities: passes PSS restricted */
	unsigned int uid;        /* the sandbox user (runAsUser, runAsGroup, fsGroup) */
	long deadline_s;         /* activeDeadlineSeconds (podman's copy: timeout(1) around sshd); 0: none */
	const char *group;       /* the group label, or NULL */
	int service;             /* --ingress service: a Service, sshd reachable on the pod network */
	unsigned long long mem_bytes;
	double cpus;
	long pids;
	int podman;              /* podman kube play's copy: a ConfigMap of text for the Secret (kube.c) */
} asf_kube;

#define ASF_WS_HOSTPATH 0
#define ASF_WS_EMPTYDIR 1
#define ASF_WS_PVC      2

/* The objects, in apply order: Secret, NetworkPolicy, [Service,] Pod. */
cJSON *kube_objects(const asf_kube *k, asf_err *e);
/* podman kube play's copy, STATE/NAME/podman-kube.yaml (path gets it): see kube.c. */
int kube_podman_manifest(const asf_kube *k, char *path, size_t pathlen, asf_err *e);
/* The manifest: multi-document YAML of JSON documents, mode 0600 (the host key is in it). */
int kube_write(const char *path, const char *name, const cJSON *objs, asf_err *e);
/*
 * Apply with the engine: "kubectl" (apply, wait for Ready) or "podman"
 * (kube play without network, egress table into the pod's netns, start).
 * Records "applied" in st (saved) before anything is created.
 */
int kube_apply(const asf_kube *k, const char *manifest, const char *runtime, long nofile, long nproc,
	       cJSON *st, asf_err *e);
/* The exec ingress's proxy command: kubectl exec / podman exec ... sshd -i. */
void kube_proxy_argv(asf_argv *a, const cJSON *st);
/* Remove what the manifest made; returns the number of failures. */
int kube_teardown(const char *name, const cJSON *st, cJSON *report);

/* ------------------------------------------------------------ image.c */

/* What the probe of an --image found. */
typedef struct asf_image {
	int kit;  /* no working sshd in it (or --sshd host): the host's is lent (image_kit) */
	int bash; /* /bin/bash is there (else the sandbox user's shell is /bin/sh) */
} asf_image;

/*
 * Before anything is created: the image is in the engine's local store (never
 * pulled), of this host's OS and architecture, its /bin/sh runs; whose sshd
 * will run (opts->sshd). -1 with e saying what is wrong and what to do;
 * ASF_IMAGE_ENGINE_FAILED when the engine could not run the probe at all.
 */
/* image_check's return when the engine could not run the probe at all (exit 125). */
#define ASF_IMAGE_ENGINE_FAILED (-2)
int image_check(const asf_up_opts *opts, asf_image *img, asf_err *e);
/* The host's sshd, its libraries and loader, copied into DIR/sshd-kit; recorded in st. */
int image_kit(const char *dir, cJSON *st, asf_err *e);
/* The words that start sshd in the container: the image's, or the kit's (st has "sshd_kit"). */
void image_sshd_argv(asf_argv *a, const cJSON *st);

/* up.c: the krun check, usable or not; 0 when usable, else -1 and e says why. */
int krun_usable(asf_err *e);

#endif
