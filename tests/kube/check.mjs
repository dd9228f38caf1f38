// check.mjs - every manifest asf-provision writes, in every mode, checked
// offline against Kubernetes' API schema (schema.mjs) and the Pod Security
// Standards (pss.mjs), each Pod at the level its mode promises
// (docs/kubernetes.md). Then each check is shown able to fail: every PSS rule
// on a manifest that breaks it, and the schema on a wrong type and an
// unknown field.
//
//   node tests/kube/check.mjs          (BUILD=build: the asf-provision binary)
//   node tests/kube/check.mjs FILE...  (only report on these manifests)
import { execFileSync } from "node:child_process";
import { mkdtempSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

import { BASELINE, RESTRICTED, level } from "./pss.mjs";
import { schemaPackage, validateObject } from "./schema.mjs";

let failures = 0;
const fail = (msg) => {
	failures++;
	console.log(`FAIL ${msg}`);
};

// The documents of a manifest: a comment line, then JSON documents after "---" lines.
function documents(path) {
	const text = readFileSync(path, "utf8");
	if (!text.startsWith("#"))
		fail(`${path}: does not start with a comment line`);
	return text.split(/^---$/m).slice(1).map((d, i) => {
		try {
			return JSON.parse(d);
		} catch (e) {
			fail(`${path}: document ${i + 1} is not JSON: ${e.message}`);
			return null;
		}
	}).filter(Boolean);
}

async function checkManifest(path, want) {
	const docs = documents(path);
	let pods = 0;
	for (const d of docs) {
		const errs = await validateObject(d);
		for (const e of errs)
			fail(`${path}: ${d.kind} ${d.metadata?.name}: ${e}`);
		if (d.kind !== "Pod")
			continue;
		pods++;
		const l = level(d);
		const note = [...l.baseline, ...l.restricted].join("; ");
		if (want && l.level !== want)
			fail(`${path}: Pod meets PSS ${l.level}, expected ${want}${note ? ": " + note : ""}`);
		else
			console.log(`ok   ${path}: ${docs.length} objects valid; Pod meets PSS ${l.level}` +
				(l.level !== "restricted" ? ` (not ${l.level === "baseline" ? "restricted" : "baseline"}: ` +
				(l.level === "baseline" ? l.restricted : l.baseline).join("; ") + ")" : ""));
	}
	if (!pods)
		fail(`${path}: no Pod`);
	return docs;
}

// ------------------------------------------------------------ every mode

const files = process.argv.slice(2);
let restrictedPod = null;
if (files.length) {
	for (const f of files)
		await checkManifest(f, null);
} else {
	const bin = resolve(process.env.ASF_PROVISION || join(process.env.BUILD || "build", "bin", "asf-provision"));
	const dir = mkdtempSync(join(tmpdir(), "asf-kube-check."));
	const state = join(dir, "state"), ws = join(dir, "ws");
	mkdirSync(ws);
	const modes = [
		// [name, engine, args, PSS level it promises]
		["root-hostpath", "kubectl", ["--workspace", ws], "privileged"],
		["root-hostpath-service", "kubectl", ["--workspace", `${ws}:ro`, "--ingress", "service"], "privileged"],
		["root-emptydir", "kubectl", ["--workspace-volume", "emptydir"], "baseline"],
		["root-pvc", "kubectl", ["--workspace-volume", "pvc:work", "--deadline", "3600"], "baseline"],
		["unpriv-emptydir", "kubectl", ["--unprivileged", "--workspace-volume", "emptydir"], "restricted"],
		["unpriv-pvc-ro", "kubectl", ["--unprivileged", "--workspace-volume", "pvc:work:ro", "--namespace",
			"sandboxes"], "restricted"],
		["unpriv-service", "kubectl", ["--unprivileged", "--workspace-volume", "emptydir", "--ingress", "service",
			"--deadline", "600"], "restricted"],
		["unpriv-hostpath", "kubectl", ["--unprivileged", "--workspace", ws], "privileged"],
		// podman kube play's copy (podman-kube.yaml) as well as the manifest
		["podman-root", "podman", ["--workspace", ws, "--allow-host-account-uid"], "privileged"],
		["podman-unpriv", "podman", ["--unprivileged", "--workspace-volume", "emptydir", "--deadline", "600"],
			"restricted"],
	];
	try {
		for (const [name, engine, args, want] of modes) {
			try {
				execFileSync(bin, ["--state-dir", state, "--engine", engine, "manifest", "--backend",
					"kubernetes", "--name", name, "--image", "registry.example/asf-sshd:1", ...args],
				{ stdio: ["ignore", "ignore", "pipe"] });
			} catch (e) {
				fail(`${name}: ${bin} manifest ${args.join(" ")}: ${e.status !== null ? "exit " + e.status :
					e.signal}: ${String(e.stderr || e.message).trim()}`);
				continue;
			}
			const docs = await checkManifest(join(state, name, "kubernetes.yaml"), want);
			if (engine === "podman")
				await checkManifest(join(state, name, "podman-kube.yaml"), want);
			if (name === "unpriv-emptydir")
				restrictedPod = docs.find((d) => d.kind === "Pod");
		}
	} finally {
		rmSync(dir, { recursive: true, force: true });
	}
}

// ------------------------------------------------------------ each check can fail

if (!files.length && !restrictedPod)
	fail("self-test: no unprivileged Pod was rendered, so no rule could be shown failing");
if (restrictedPod) {
	const clone = () => JSON.parse(JSON.stringify(restrictedPod));
	const ctr = (p) => p.spec.containers[0];
	// One manifest that breaks each rule, keyed by policy and control.
	const breaks = {
		baseline: {
			"HostProcess": (p) => { ctr(p).securityContext.windowsOptions = { hostProcess: true }; },
			"Host Namespaces": (p) => { p.spec.hostPID = true; },
			"Privileged Containers": (p) => { ctr(p).securityContext.privileged = true; },
			"Capabilities": (p) => { ctr(p).securityContext.capabilities.add = ["SYS_ADMIN"]; },
			"HostPath Volumes": (p) => { p.spec.volumes.push({ name: "h", hostPath: { path: "/" } }); },
			"Host Ports": (p) => { ctr(p).ports = [{ containerPort: 2222, hostPort: 2222 }]; },
			"AppArmor": (p) => { p.spec.securityContext.appArmorProfile = { type: "Unconfined" }; },
			"SELinux": (p) => { ctr(p).securityContext.seLinuxOptions = { type: "spc_t" }; },
			"/proc Mount Type": (p) => { ctr(p).securityContext.procMount = "Unmasked"; },
			"Seccomp": (p) => { ctr(p).securityContext.seccompProfile = { type: "Unconfined" }; },
			"Sysctls": (p) => { p.spec.securityContext.sysctls = [{ name: "kernel.msgmax", value: "1" }]; },
		},
		restricted: {
			"Volume Types": (p) => { p.spec.volumes.push({ name: "n", nfs: { server: "x", path: "/" } }); },
			"Privilege Escalation": (p) => { delete ctr(p).securityContext.allowPrivilegeEscalation; },
			"Running as Non-root": (p) => {
				delete ctr(p).securityContext.runAsNonRoot;
				delete p.spec.securityContext.runAsNonRoot;
			},
			"Running as Non-root user": (p) => { ctr(p).securityContext.runAsUser = 0; },
			"Seccomp": (p) => {
				delete ctr(p).securityContext.seccompProfile;
				delete p.spec.securityContext.seccompProfile;
			},
			"Capabilities": (p) => { ctr(p).securityContext.capabilities.add = ["CHOWN"]; },
		},
	};
	const base = level(restrictedPod);
	if (base.level !== "restricted")
		fail(`self-test: the unprivileged Pod is not restricted: ${[...base.baseline, ...base.restricted]}`);
	for (const [policy, rules] of [["baseline", BASELINE], ["restricted", RESTRICTED]]) {
		for (const rule of rules) {
			const brk = breaks[policy][rule.control];
			if (!brk) {
				fail(`self-test: no manifest breaks ${policy} "${rule.control}"`);
				continue;
			}
			const p = clone();
			brk(p);
			const v = [];
			rule.check(p, v);
			const l = level(p);
			const want = policy === "baseline" ? "privileged" : "baseline";
			if (!v.length || l.level !== want)
				fail(`self-test: ${policy} "${rule.control}" [${rule.fields}] did not fail on a Pod that ` +
				     `breaks it (level ${l.level})`);
			else
				console.log(`ok   self-test: ${policy} "${rule.control}" fails: ${v.join("; ")}`);
		}
	}
	// Each other restricted field of a control, broken on its own: the pod-level field where the
	// control names one, the other host namespaces, an init container, an annotation form.
	const init = (p) => {
		p.spec.initContainers = [JSON.parse(JSON.stringify(ctr(p)))];
		p.spec.initContainers[0].name = "init";
		return p.spec.initContainers[0];
	};
	const more = [
		["baseline", "HostProcess", (p) => { p.spec.securityContext.windowsOptions = { hostProcess: true }; }],
		["baseline", "Host Namespaces", (p) => { p.spec.hostNetwork = true; }],
		["baseline", "Host Namespaces", (p) => { p.spec.hostIPC = true; }],
		["baseline", "Privileged Containers", (p) => { init(p).securityContext.privileged = true; }],
		["baseline", "Capabilities", (p) => { init(p).securityContext.capabilities.add = ["NET_RAW"]; }],
		["baseline", "Host Ports", (p) => { init(p).ports = [{ containerPort: 1, hostPort: 1 }]; }],
		["baseline", "AppArmor", (p) => { ctr(p).securityContext.appArmorProfile = { type: "Unconfined" }; }],
		["baseline", "AppArmor", (p) => {
			p.metadata.annotations = { ...p.metadata.annotations,
				"container.apparmor.security.beta.kubernetes.io/sshd": "unconfined" };
		}],
		["baseline", "SELinux", (p) => { p.spec.securityContext.seLinuxOptions = { user: "system_u" }; }],
		["baseline", "SELinux", (p) => { ctr(p).securityContext.seLinuxOptions = { role: "system_r" }; }],
		["baseline", "/proc Mount Type", (p) => { init(p).securityContext.procMount = "Unmasked"; }],
		["baseline", "Seccomp", (p) => { p.spec.securityContext.seccompProfile = { type: "Unconfined" }; }],
		["restricted", "Volume Types", (p) => { p.spec.volumes.push({ name: "g", gitRepo: { repository: "x" } }); }],
		["restricted", "Privilege Escalation", (p) => { init(p).securityContext.allowPrivilegeEscalation = true; }],
		["restricted", "Running as Non-root", (p) => { ctr(p).securityContext.runAsNonRoot = false; }],
		["restricted", "Running as Non-root user", (p) => { p.spec.securityContext.runAsUser = 0; }],
		["restricted", "Seccomp", (p) => { ctr(p).securityContext.seccompProfile = { type: "Unconfined" }; }],
		["restricted", "Capabilities", (p) => { init(p).securityContext.capabilities.drop = ["NET_RAW"]; }],
	];
	for (const [policy, control, brk] of more) {
		const rule = (policy === "baseline" ? BASELINE : RESTRICTED).find((r) => r.control === control);
		const p = clone();
		p.metadata = p.metadata || {};
		brk(p);
		const v = [];
		rule.check(p, v);
		if (!v.length)
			fail(`self-test: ${policy} "${control}" [${rule.fields}] did not fail on a Pod that breaks it`);
		else
			console.log(`ok   self-test: ${policy} "${control}" fails: ${v.join("; ")}`);
	}
	// And the other side of each rule: every value the standard allows for its fields passes it,
	// so a rule that refuses too much fails here too. The lists are the standard's, written out
	// again here rather than taken from pss.mjs, so that dropping one there fails here.
	const stdCaps = ["AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
		"NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"];
	const stdSysctls = ["kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_local_reserved_ports",
		"net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start",
		"net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
		"net.ipv4.tcp_keepalive_probes"];
	const stdVolumes = ["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
		"projected", "secret"];
	const allows = {
		baseline: {
			"HostProcess": (p) => {
				p.spec.securityContext.windowsOptions = { hostProcess: false };
				ctr(p).securityContext.windowsOptions = { hostProcess: false };
			},
			"Host Namespaces": (p) => { Object.assign(p.spec, { hostNetwork: false, hostPID: false, hostIPC: false }); },
			"Privileged Containers": (p) => { ctr(p).securityContext.privileged = false; },
			"Capabilities": (p) => { ctr(p).securityContext.capabilities.add = [...stdCaps]; },
			"HostPath Volumes": (p) => { p.spec.volumes.push({ name: "e", emptyDir: {} }); },
			"Host Ports": (p) => { ctr(p).ports = [{ containerPort: 2222, hostPort: 0 }]; },
			"AppArmor": (p) => {
				p.spec.securityContext.appArmorProfile = { type: "Localhost", localhostProfile: "asf" };
				ctr(p).securityContext.appArmorProfile = { type: "RuntimeDefault" };
				p.metadata.annotations = { ...p.metadata.annotations,
					"container.apparmor.security.beta.kubernetes.io/sshd": "localhost/asf",
					"container.apparmor.security.beta.kubernetes.io/other": "runtime/default" };
			},
			"SELinux": (p) => {
				p.spec.securityContext.seLinuxOptions = { type: "container_init_t", user: "", role: "", level: "s0:c1" };
				ctr(p).securityContext.seLinuxOptions = { type: "container_engine_t" };
			},
			"/proc Mount Type": (p) => { ctr(p).securityContext.procMount = "Default"; },
			"Seccomp": (p) => { ctr(p).securityContext.seccompProfile = { type: "Localhost", localhostProfile: "a.json" }; },
			"Sysctls": (p) => { p.spec.securityContext.sysctls = stdSysctls.map((name) => ({ name, value: "1" })); },
		},
		restricted: {
			"Volume Types": (p) => {
				for (const t of stdVolumes)
					p.spec.volumes.push({ name: `v-${t.toLowerCase()}`, [t]: {} });
			},
			"Privilege Escalation": (p) => { ctr(p).securityContext.allowPrivilegeEscalation = false; },
			"Running as Non-root": (p) => {
				delete p.spec.securityContext.runAsNonRoot;
				ctr(p).securityContext.runAsNonRoot = true;
			},
			"Running as Non-root user": (p) => {
				delete p.spec.securityContext.runAsUser;
				ctr(p).securityContext.runAsUser = 1;
			},
			"Seccomp": (p) => {
				p.spec.securityContext.seccompProfile = { type: "Localhost", localhostProfile: "a.json" };
				delete ctr(p).securityContext.seccompProfile;
			},
			"Capabilities": (p) => { ctr(p).securityContext.capabilities = { drop: ["ALL"], add: ["NET_BIND_SERVICE"] }; },
		},
	};
	for (const [policy, rules] of [["baseline", BASELINE], ["restricted", RESTRICTED]]) {
		for (const rule of rules) {
			const ok = allows[policy][rule.control];
			if (!ok) {
				fail(`self-test: no manifest uses the allowed values of ${policy} "${rule.control}"`);
				continue;
			}
			const p = clone();
			p.metadata = p.metadata || {};
			ok(p);
			const v = [];
			rule.check(p, v);
			if (v.length)
				fail(`self-test: ${policy} "${rule.control}" [${rule.fields}] refused allowed values: ${v.join("; ")}`);
			else
				console.log(`ok   self-test: ${policy} "${rule.control}" passes its allowed values`);
		}
	}
	// The schema: a wrong type and an unknown field (a typo of a security field).
	const p = clone();
	ctr(p).securityContext.runAsUser = "1000";
	ctr(p).securityContext.runAsNonroot = true;
	const errs = await validateObject(p);
	const typed = errs.some((e) => e.includes("runAsUser must be integer"));
	const unknown = errs.some((e) => e.includes("runAsNonroot: unknown field"));
	if (!typed || !unknown)
		fail(`self-test: the schema check missed ${!typed ? "a string runAsUser" : "the unknown field runAsNonroot"}: ` +
		     errs.join("; "));
	else
		console.log(`ok   self-test: schema refuses a string runAsUser and the unknown field runAsNonroot`);
}

console.log(`kube-manifests: schema kubernetes-models ${schemaPackage}; ${failures ? `${failures} FAILED` : "all passed"}`);
process.exit(failures ? 1 : 0);
