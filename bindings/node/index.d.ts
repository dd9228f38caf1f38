/// <reference types="node" />
/*
 * TypeScript declarations for the libasp Node binding (index.js).
 * The C API these wrap is include/asp.h.
 */

/** Symbolic names of every libasp error code (asp_error_name). */
export type AspErrorCode =
	| 'ASP_OK'
	| 'ASP_ERROR'
	| 'ASP_EINVAL'
	| 'ASP_ENOMEM'
	| 'ASP_ENOCONFIG'
	| 'ASP_ECONFIG'
	| 'ASP_EHOSTKEY'
	| 'ASP_EAUTH'
	| 'ASP_ECONNECT'
	| 'ASP_ECONNLOST'
	| 'ASP_ETIMEOUT'
	| 'ASP_ECANCELLED'
	| 'ASP_ENOENT'
	| 'ASP_EISDIR'
	| 'ASP_EACCES'
	| 'ASP_EEXIST'
	| 'ASP_ENOTDIR'
	| 'ASP_ENOTEMPTY'
	| 'ASP_ENOSPC'
	| 'ASP_EPROTO'
	| 'ASP_EIO'
	| 'ASP_ELIMIT'
	| 'ASP_EROFS'
	| 'ASP_EBUSY';

/** An error reported by libasp, or an argument libasp would refuse (ASP_EINVAL). */
export declare class AspError extends Error {
	constructor(errno: number, message?: string, options?: { cause?: unknown });
	readonly name: 'AspError';
	/** e.g. 'ASP_ENOENT'. A code newer than these declarations still has its C name. */
	readonly code: AspErrorCode | (string & {});
	/** The negative asp_error_code value, e.g. -12. */
	readonly errno: number;
}

/** A path or C string: UTF-8 text, or raw bytes (for names that are not UTF-8). No NUL bytes. */
export type CString = string | Uint8Array;

export interface OpenOptions {
	/**
	 * The .asp.json to use; default: discovery ($ASP_CONFIG, then startDir and its parents),
	 * which parses the very file it judged.
	 */
	config?: CString;
	/**
	 * The configuration's content, used instead of reading a file; `config` then only names it
	 * (messages, relative identity paths). Not judged: readConfig() gives a discovered file's
	 * judged text.
	 */
	configText?: CString;
	/** Where discovery starts; default: process.cwd(). */
	startDir?: CString;
	/** Trust-on-first-use store; default $ASP_KNOWN_HOSTS, else $XDG_CONFIG_HOME/asp/known_hosts. */
	knownHosts?: CString;
	/** Most connections kept to the sandbox; default 4. */
	maxConnections?: number;
	/** TCP connect + SSH handshake + authentication deadline, ms; default 10000. */
	connectTimeout?: number;
	/** Longest silence tolerated while a reply is due, ms; default 30000 (does not limit commands). */
	ioTimeout?: number;
	/** Keepalive after this much silence, seconds; default 15. */
	keepalive?: number;
	/** Close connections idle this long, seconds; default 300. */
	idleClose?: number;
	/** Do not connect in open(); the first operation connects. */
	lazy?: boolean;
	/** Default overall deadline of one file call, ms; default 300000 (a command's run time is exec's timeout). */
	opTimeout?: number;
	/** Most bytes one read returns (more: ELIMIT); default 256 MiB. */
	maxReadBytes?: number | bigint;
	/** Default maxOutput of exec (bytes kept per stream); default 64 MiB. */
	maxOutput?: number;
	/** Most entries one list returns (more: ELIMIT); default 100000. */
	maxListEntries?: number;
	/** Most bytes of names one list holds, their lengths added up (more: ELIMIT); default 32 MiB. A name over 4096 bytes is ELIMIT anyway. */
	maxListBytes?: number | bigint;
	/** How file calls reach the files: 'auto' (default: SFTP when offered, else shell commands), 'sftp' or 'exec'. */
	fileTransport?: 'auto' | 'sftp' | 'exec';
}

/** Options every file call takes. */
export interface CallOptions {
	/** Aborting stops the call (ECANCELLED); a recursive remove also stops its remote rm. */
	signal?: AbortSignal;
	/** The call's overall deadline, ms (ETIMEOUT); default: the sandbox's opTimeout. */
	timeout?: number;
}

export interface ReadOptions extends CallOptions {
	/** Byte offset to start at; default 0. */
	offset?: number | bigint;
	/** Most bytes to read; default: to the end of the file. */
	limit?: number | bigint;
}

export interface WriteOptions extends CallOptions {
	/** Permission bits; default: keep an existing file's mode, 0644 (less umask) for a new one. */
	mode?: number;
	/** Create missing parent directories (0755), as mkdir's parents. */
	parents?: boolean;
	/** Temp file + rename, so readers never see a torn file; default true. */
	atomic?: boolean;
}

export type OutputStream = 'stdout' | 'stderr';

export interface ExecOptions {
	/** Working directory, relative to the workspace; default: the workspace. */
	cwd?: CString;
	/** Variables added to the command's environment (names: [A-Za-z_][A-Za-z0-9_]*). */
	env?: Record<string, string | Uint8Array | number | boolean | undefined>;
	/** Bytes fed to stdin, then EOF. */
	stdin?: string | Uint8Array;
	/**
	 * The command's kill timer: kill its process group after this many ms and
	 * resolve with timedOut: true; 0 or absent: no limit.
	 */
	timeout?: number;
	/**
	 * The whole call's deadline, ms, the run included: when it passes the
	 * command's group is killed and the exec rejects with ASP_ETIMEOUT.
	 * 0 or absent: the sandbox's opTimeout bounds only the start.
	 */
	deadline?: number;
	/** Aborting kills the command's whole remote process group; the result has cancelled: true. */
	signal?: AbortSignal;
	/**
	 * Output as it arrives, in order per stream, on the main thread. Throwing
	 * stops the command and rejects the exec with what was thrown.
	 */
	onData?: (stream: OutputStream, chunk: Buffer) => void;
	/** Keep at most this many bytes of each stream in the result (half head, half tail); default: the sandbox's maxOutput. */
	maxOutput?: number;
	/** After SIGTERM, wait this long before SIGKILL, ms; default 2000. */
	killGrace?: number;
}

export interface ExecResult {
	/** 0..255, or null when the command was killed by a signal. */
	exitCode: number | null;
	/** The terminating signal, e.g. 'SIGTERM', or null. */
	signal: NodeJS.Signals | string | null;
	stdout: Buffer;
	stderr: Buffer;
	/** The timeout passed and the command was killed. */
	timedOut: boolean;
	/** The AbortSignal (or an exception in onData) stopped the command. */
	cancelled: boolean;
	durationMs: number;
	/** Bytes each stream produced, including any dropped by maxOutput. */
	stdoutTotal: number;
	stderrTotal: number;
	/** maxOutput dropped bytes from the middle of a stream. */
	truncated: boolean;
}

export interface StartOptions {
	/** Working directory, relative to the workspace; default: the workspace. */
	cwd?: CString;
	/** Variables added to the command's environment. */
	env?: Record<string, string | Uint8Array | number | boolean | undefined>;
	/** The kill timer: kill its process group after this many ms (the result has timedOut: true). */
	timeout?: number;
	/** Ms the start may take (until the server accepted the command); default the sandbox's opTimeout. */
	deadline?: number;
	/** Aborting kills the command's whole remote process group (the result has cancelled: true). */
	signal?: AbortSignal;
	/** Keep at most this many bytes of each stream in the result (head and tail). */
	maxOutput?: number;
	/** After SIGTERM, wait this long before SIGKILL, ms; default 2000. */
	killGrace?: number;
	/**
	 * Run on a pseudo-terminal: stdout and stderr are one stream ('stdout'), the terminal
	 * echoes input and writes '\r\n'; writing '\x03' (Ctrl-C) interrupts the foreground program.
	 */
	pty?: boolean;
	/** With pty: TERM (default 'xterm-256color'), and the size (default 80 x 24). */
	term?: CString;
	cols?: number;
	rows?: number;
}

export interface ProcessChunk {
	stream: OutputStream;
	data: Buffer;
}

/** A running command with a handle (Sandbox.start). Its methods may be called concurrently. */
export declare class Process {
	private constructor();
	/** true when it runs on a pseudo-terminal. */
	readonly pty: boolean;
	/** true once close() was called. */
	readonly closed: boolean;
	/** Send bytes (a string as UTF-8) to stdin; resolves once sent, never waits for a reply. */
	write(data: string | Uint8Array): Promise<void>;
	/** EOF on stdin after what was written. */
	closeStdin(): Promise<void>;
	/**
	 * The next output of either stream, or null at the end (the command ended and all was
	 * read). timeout (ms; 0: what is there): rejects with ASP_ETIMEOUT when nothing came.
	 */
	read(options?: { timeout?: number; size?: number }): Promise<ProcessChunk | null>;
	[Symbol.asyncIterator](): AsyncIterator<ProcessChunk>;
	/** Send a signal by name ('SIGTERM', 'INT', ...) or number (sent by its name) to the process group. */
	kill(signal?: NodeJS.Signals | string | number): Promise<void>;
	/** The terminal's new size (pty only). */
	resize(cols: number, rows: number): Promise<void>;
	/** exec()'s result once the command ended (the same object each call); ASP_ETIMEOUT while it runs. */
	wait(options?: { timeout?: number }): Promise<ExecResult>;
	/** Kill the command if it still runs (its whole process group) and free the handle. */
	close(): Promise<void>;
	[Symbol.asyncDispose](): Promise<void>;
}

export type FileType = 'file' | 'directory' | 'symlink' | 'other';

export interface Stat {
	type: FileType;
	size: number;
	/** Permission bits (07777). */
	mode: number;
	mtime: Date;
	mtimeMs: number;
}

export interface DirEntry extends Stat {
	/** Entry name, without a directory part (symlinks are not followed). */
	name: string;
}

export interface MkdirOptions extends CallOptions {
	/** Default 0755. */
	mode?: number;
	/** Create missing parents; an existing directory is not an error. */
	parents?: boolean;
}

export interface RemoveOptions extends CallOptions {
	/** Remove a directory and everything in it. */
	recursive?: boolean;
}

export interface SandboxInfo {
	/** How the host key was trusted. */
	trust: 'pinned' | 'known' | 'first-use';
	/** How the client authenticated. */
	auth: 'none' | 'publickey' | 'agent';
	/** e.g. 'ssh-ed25519'. */
	hostKeyType: string;
	/** 'SHA256:...'. */
	hostKeyFingerprint: string;
	/** The trust-on-first-use store consulted; '' when the key is pinned. */
	knownHosts: string;
	/** Negotiated key exchange, e.g. 'curve25519-sha256'. */
	kex: string;
	/** Negotiated cipher, e.g. 'aes128-ctr' ("A (client to server), B (server to client)" when they differ). */
	cipher: string;
	/** Negotiated MAC, e.g. 'hmac-sha2-256'. */
	mac: string;
	/** The server's identification string, e.g. 'SSH-2.0-OpenSSH_9.2p1 ...'. */
	serverBanner: string;
	/** How file calls reach the files on this connection; null until a file call decided. */
	fileTransport: 'sftp' | 'exec' | null;
}

export interface BgStartOptions extends CallOptions {
	/** A label, stored and listed as given (never shell text). */
	name?: CString;
	/** Working directory, relative to the workspace. */
	cwd?: CString;
	env?: Record<string, string | Uint8Array | number | undefined>;
	/** Bytes of output kept in the sandbox (the newest, in two halves); default 1 MiB. */
	keep?: number | bigint;
}

export interface BgReadOptions extends CallOptions {
	/** Offset over every byte the command wrote; default 0. */
	offset?: number | bigint;
	/** Most bytes returned; default 1 MiB, at most 64 MiB. */
	limit?: number | bigint;
}

export interface BgWaitOptions {
	/** How long to wait, ms; undefined: as long as it takes; 0: only look. */
	timeout?: number;
	signal?: AbortSignal | null;
}

export interface BgStatus {
	/** 'lost': gone without a status (killed with its supervisor, or the sandbox restarted). */
	state: 'running' | 'exited' | 'lost';
	/** 0..255 once it exited normally, else null. */
	exitCode: number | null;
	/** The signal that ended it, e.g. 'SIGTERM', or null. */
	signal: NodeJS.Signals | string | null;
	/** More output may come (the command or something it started holds its output). */
	outputOpen: boolean;
	/** Offset of the first output byte still kept. */
	outputStart: number;
	/** Bytes written so far, kept or dropped. */
	outputSize: number;
}

export interface BgOutput {
	data: Buffer;
	/** Where data begins: later than asked when older bytes were dropped. */
	offset: number;
	/** The offset to ask for next. */
	next: number;
	status: BgStatus;
}

export interface BgProcess {
	id: string;
	name: string;
	command: string;
	/** When it was started, ms since the epoch (the starter's clock). */
	startMs: number;
	/** Its pid and process group in the sandbox (0: not yet known). */
	pid: number;
	status: BgStatus;
}

/** An open sandbox: a validated configuration and a pool of SSH connections. */
export declare class Sandbox {
	private constructor();
	/** The sandbox workspace (an absolute path in the sandbox). Relative paths resolve against it. */
	readonly workspace: string;
	/** Absolute path of the .asp.json in use. */
	readonly configPath: string;
	/** true once close() was called. */
	readonly closed: boolean;

	read(path: CString, options?: ReadOptions): Promise<Buffer>;
	write(path: CString, data: string | Uint8Array, options?: WriteOptions): Promise<void>;
	exec(command: CString, options?: ExecOptions): Promise<ExecResult>;
	/** Start a command and resolve once the server accepted it, with a handle to drive it. */
	start(command: CString, options?: StartOptions): Promise<Process>;
	stat(path: CString, options?: CallOptions): Promise<Stat>;
	mkdir(path: CString, options?: MkdirOptions): Promise<void>;
	list(path: CString, options?: CallOptions): Promise<DirEntry[]>;
	remove(path: CString, options?: RemoveOptions): Promise<void>;
	rename(from: CString, to: CString, options?: CallOptions): Promise<void>;
	/** Connect until the pool holds `connections` (at most maxConnections); 0 does nothing. */
	warm(connections: number, options?: CallOptions): Promise<void>;
	/** Start a command in the background (it outlives the call, the connection and this process); its id. */
	bgStart(command: CString, options?: BgStartOptions): Promise<string>;
	/** Its output from options.offset; offset in the answer is later than asked when older bytes were dropped. */
	bgRead(id: string, options?: BgReadOptions): Promise<BgOutput>;
	/** Send a signal (default 'SIGTERM') to its whole process group; one that ended is no error. */
	bgSignal(id: string, sig?: NodeJS.Signals | number, options?: CallOptions): Promise<void>;
	/** Wait for it to end; rejects with ASP_ETIMEOUT when it still runs after options.timeout ms. */
	bgWait(id: string, options?: BgWaitOptions): Promise<BgStatus>;
	/** Remove an ended one's files (a running one: ASP_EINVAL). */
	bgRemove(id: string, options?: CallOptions): Promise<void>;
	/** Every background process of the sandbox user, by start time. */
	bgList(options?: CallOptions): Promise<BgProcess[]>;
	/** May connect (when no connection is open), and so reject as open() can. */
	info(): Promise<SandboxInfo>;
	/** Waits for operations in flight, then closes every connection. Later calls reject (ASP_EINVAL). */
	close(): Promise<void>;
}

/** Find and validate .asp.json and connect (unless lazy). */
export declare function open(options?: OpenOptions): Promise<Sandbox>;
/** Discovery only: the absolute path of the .asp.json that open() would use. */
export declare function findConfig(startDir?: CString): Promise<string>;
/**
 * Discovery returning the judged file's content, read from the descriptor discovery judged:
 * pass both to open({ config: path, configText: text }) to open exactly that file.
 */
export declare function readConfig(startDir?: CString): Promise<{ path: string; text: string }>;
/** Load and validate a configuration file without connecting. */
export declare function checkConfig(path: CString): Promise<void>;
/** The running library's version, e.g. '0.1.0'. */
export declare function version(): string;
/** Load the shared library now (otherwise done on first use); returns where it was found. */
export declare function load(): string;
/**
 * Where the shared library was loaded from ($ASP_LIBRARY, the build tree, or 'libasp.so.0').
 * Under require it loads the library when read; under import it was read at import
 * (undefined when the library could not be loaded then).
 */
export declare const libraryPath: string;
/** Every error code by name, from the library: { ASP_OK: 0, ASP_ERROR: -1, ... } (read at import under import, like libraryPath). */
export declare const codes: Readonly<Record<AspErrorCode, number>>;
/** Pass as ReadOptions.limit to read to the end (the default). */
export declare const READ_ALL: bigint;
