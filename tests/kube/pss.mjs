// pss.mjs - the Pod Security Standards' "baseline" and "restricted" policies as
// checks of a Pod, written from the standard's text
// (https://kubernetes.io/docs/concepts/security/pod-security-standards/, the
// policy tables of Kubernetes v1.34). Each rule names its control and the
// standard's "Restricted Fields"; check() returns one message per violation.
//
// Checked against the text again, control by control: the baseline and restricted
// tables agree with the rules below. The older texts of the page (the 2020-2021
// ones, before Pod Security Admission) had fewer controls: no HostProcess, /proc
// Mount Type, Seccomp or Sysctls in baseline, a restricted Seccomp on the
// seccomp.security.alpha annotations, an optional "Non-root groups" control that
// the current text no longer has, and a smaller safe-sysctl list; these rules
// follow v1.34. The safe sysctls are the standard's list (net.ipv4.* added
// through v1.29). The kubelet's own list of safe sysctls (the sysctl-cluster
// task page) added net.ipv4.tcp_rmem and tcp_wmem in v1.32; whether the
// standard followed was not confirmed from its text, so they are refused here
// (a Pod that sets them is reported below baseline: fail closed, never a false
// "restricted"). tests/kube/check.mjs shows each rule failing on a Pod that
// breaks it and passing each value its control allows.
//
// Everything the standard says of "spec.containers[*]" holds for
// initContainers and ephemeralContainers too; containersOf() walks all three.

function containersOf(pod) {
	const s = pod.spec || {};
	return [
		...(s.containers || []).map((c, i) => [`spec.containers[${i}]`, c]),
		...(s.initContainers || []).map((c, i) => [`spec.initContainers[${i}]`, c]),
		...(s.ephemeralContainers || []).map((c, i) => [`spec.ephemeralContainers[${i}]`, c]),
	];
}
const psc = (pod) => (pod.spec && pod.spec.securityContext) || {};
const csc = (c) => c.securityContext || {};
const isUndef = (v) => v === undefined || v === null;

// Baseline: "Adding additional capabilities beyond those listed below must be disallowed."
const BASELINE_CAPS = ["AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
	"NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"];
const SAFE_SYSCTLS = ["kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
	"net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range",
	"net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
	"net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"];
const SELINUX_TYPES = ["", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"];
const RESTRICTED_VOLUMES = ["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
	"persistentVolumeClaim", "projected", "secret"];

export const BASELINE = [
	{
		control: "HostProcess",
		fields: "spec.securityContext.windowsOptions.hostProcess, spec.containers[*].securityContext." +
			"windowsOptions.hostProcess (allowed: undefined/nil, false)",
		check(pod, v) {
			if (!isUndef(psc(pod).windowsOptions?.hostProcess) && psc(pod).windowsOptions.hostProcess !== false)
				v.push("spec.securityContext.windowsOptions.hostProcess");
			for (const [p, c] of containersOf(pod))
				if (![undefined, null, false].includes(csc(c).windowsOptions?.hostProcess))
					v.push(`${p}.securityContext.windowsOptions.hostProcess`);
		},
	},
	{
		control: "Host Namespaces",
		fields: "spec.hostNetwork, spec.hostPID, spec.hostIPC (allowed: undefined/nil, false)",
		check(pod, v) {
			for (const f of ["hostNetwork", "hostPID", "hostIPC"])
				if (![undefined, null, false].includes((pod.spec || {})[f]))
					v.push(`spec.${f}`);
		},
	},
	{
		control: "Privileged Containers",
		fields: "spec.containers[*].securityContext.privileged (allowed: undefined/nil, false)",
		check(pod, v) {
			for (const [p, c] of containersOf(pod))
				if (![undefined, null, false].includes(csc(c).privileged))
					v.push(`${p}.securityContext.privileged`);
		},
	},
	{
		control: "Capabilities",
		fields: "spec.containers[*].securityContext.capabilities.add (allowed: undefined/nil, " +
			BASELINE_CAPS.join(", ") + ")",
		check(pod, v) {
			for (const [p, c] of containersOf(pod))
				for (const cap of csc(c).capabilities?.add || [])
					if (!BASELINE_CAPS.includes(cap))
						v.push(`${p}.securityContext.capabilities.add: ${cap}`);
		},
	},
	{
		control: "HostPath Volumes",
		fields: "spec.volumes[*].hostPath (allowed: undefined/nil)",
		check(pod, v) {
			(pod.spec?.volumes || []).forEach((vol, i) => {
				if (!isUndef(vol.hostPath))
					v.push(`spec.volumes[${i}].hostPath`);
			});
		},
	},
	{
		control: "Host Ports",
		fields: "spec.containers[*].ports[*].hostPort (allowed: undefined/nil, a known list, 0)",
		check(pod, v) {
			for (const [p, c] of containersOf(pod))
				(c.ports || []).forEach((port, i) => {
					if (![undefined, null, 0].includes(port.hostPort))
						v.push(`${p}.ports[${i}].hostPort`);
				});
		},
	},
	{
		control: "AppArmor",
		fields: "spec.securityContext.appArmorProfile.type, spec.containers[*].securityContext." +
			"appArmorProfile.type (allowed: undefined/nil, RuntimeDefault, Localhost); metadata.annotations" +
			"[\"container.apparmor.security.beta.kubernetes.io/*\"] (allowed: undefined/nil, runtime/default, localhost/*)",
		check(pod, v) {
			const ok = (t) => [undefined, null, "RuntimeDefault", "Localhost"].includes(t);
			if (!ok(psc(pod).appArmorProfile?.type))
				v.push("spec.securityContext.appArmorProfile.type");
			for (const [p, c] of containersOf(pod))
				if (!ok(csc(c).appArmorProfile?.type))
					v.push(`${p}.securityContext.appArmorProfile.type`);
			for (const [k, val] of Object.entries(pod.metadata?.annotations || {}))
				if (k.startsWith("container.apparmor.security.beta.kubernetes.io/") &&
				    val !== "runtime/default" && !String(val).startsWith("localhost/"))
					v.push(`metadata.annotations["${k}"]`);
		},
	},
	{
		control: "SELinux",
		fields: "spec.securityContext.seLinuxOptions.type, spec.containers[*].securityContext.seLinuxOptions." +
			"type (allowed: undefined/\"\", " + SELINUX_TYPES.slice(1).join(", ") + "); *.seLinuxOptions.user " +
			"and .role (allowed: undefined/\"\")",
		check(pod, v) {
			const one = (o, p) => {
				if (!o)
					return;
				if (!isUndef(o.type) && !SELINUX_TYPES.includes(o.type))
					v.push(`${p}.seLinuxOptions.type`);
				for (const f of ["user", "role"])
					if (!isUndef(o[f]) && o[f] !== "")
						v.push(`${p}.seLinuxOptions.${f}`);
			};
			one(psc(pod).seLinuxOptions, "spec.securityContext");
			for (const [p, c] of containersOf(pod))
				one(csc(c).seLinuxOptions, `${p}.securityContext`);
		},
	},
	{
		control: "/proc Mount Type",
		fields: "spec.containers[*].securityContext.procMount (allowed: undefined/nil, Default)",
		check(pod, v) {
			for (const [p, c] of containersOf(pod))
				if (![undefined, null, "Default"].includes(csc(c).procMount))
					v.push(`${p}.securityContext.procMount`);
		},
	},
	{
		control: "Seccomp",
		fields: "spec.securityContext.seccompProfile.type, spec.containers[*].securityContext.seccompProfile." +
			"type (allowed: undefined/nil, RuntimeDefault, Localhost)",
		check(pod, v) {
			const ok = (t) => [undefined, null, "RuntimeDefault", "Localhost"].includes(t);
			if (!ok(psc(pod).seccompProfile?.type))
				v.push("spec.securityContext.seccompProfile.type");
			for (const [p, c] of containersOf(pod))
				if (!ok(csc(c).seccompProfile?.type))
					v.push(`${p}.securityContext.seccompProfile.type`);
		},
	},
	{
		control: "Sysctls",
		fields: "spec.securityContext.sysctls[*].name (allowed: undefined/nil, " + SAFE_SYSCTLS.join(", ") + ")",
		check(pod, v) {
			(psc(pod).sysctls || []).forEach((s, i) => {
				if (!SAFE_SYSCTLS.includes(s.name))
					v.push(`spec.securityContext.sysctls[${i}].name: ${s.name}`);
			});
		},
	},
];

export const RESTRICTED = [
	{
		control: "Volume Types",
		fields: "spec.volumes[*] (allowed: every volume sets only one of " + RESTRICTED_VOLUMES.join(", ") + ")",
		check(pod, v) {
			(pod.spec?.volumes || []).forEach((vol, i) => {
				for (const k of Object.keys(vol))
					if (k !== "name" && !RESTRICTED_VOLUMES.includes(k))
						v.push(`spec.volumes[${i}].${k}`);
			});
		},
	},
	{
		control: "Privilege Escalation",
		fields: "spec.containers[*].securityContext.allowPrivilegeEscalation (allowed: false)",
		check(pod, v) {
			for (const [p, c] of containersOf(pod))
				if (csc(c).allowPrivilegeEscalation !== false)
					v.push(`${p}.securityContext.allowPrivilegeEscalation`);
		},
	},
	{
		control: "Running as Non-root",
		fields: "spec.securityContext.runAsNonRoot, spec.containers[*].securityContext.runAsNonRoot " +
			"(allowed: true; the container fields may be undefined/nil if the pod-level one is true)",
		check(pod, v) {
			const podLevel = psc(pod).runAsNonRoot;
			if (![undefined, null, true].includes(podLevel))
				v.push("spec.securityContext.runAsNonRoot");
			for (const [p, c] of containersOf(pod)) {
				const own = csc(c).runAsNonRoot;
				if (own === true || (isUndef(own) && podLevel === true))
					continue;
				v.push(`${p}.securityContext.runAsNonRoot`);
			}
		},
	},
	{
		control: "Running as Non-root user",
		fields: "spec.securityContext.runAsUser, spec.containers[*].securityContext.runAsUser " +
			"(allowed: any non-zero value, undefined/nil)",
		check(pod, v) {
			if (psc(pod).runAsUser === 0)
				v.push("spec.securityContext.runAsUser");
			for (const [p, c] of containersOf(pod))
				if (csc(c).runAsUser === 0)
					v.push(`${p}.securityContext.runAsUser`);
		},
	},
	{
		control: "Seccomp",
		fields: "spec.securityContext.seccompProfile.type, spec.containers[*].securityContext.seccompProfile." +
			"type (allowed: RuntimeDefault, Localhost; the container fields may be undefined/nil if the " +
			"pod-level one is set)",
		check(pod, v) {
			const ok = (t) => ["RuntimeDefault", "Localhost"].includes(t);
			const podType = psc(pod).seccompProfile?.type;
			if (!isUndef(podType) && !ok(podType))
				v.push("spec.securityContext.seccompProfile.type");
			for (const [p, c] of containersOf(pod)) {
				const t = csc(c).seccompProfile?.type;
				if (ok(t) || (isUndef(t) && ok(podType)))
					continue;
				v.push(`${p}.securityContext.seccompProfile.type`);
			}
		},
	},
	{
		control: "Capabilities",
		fields: "spec.containers[*].securityContext.capabilities.drop (must include ALL), " +
			"spec.containers[*].securityContext.capabilities.add (allowed: undefined/nil, NET_BIND_SERVICE)",
		check(pod, v) {
			for (const [p, c] of containersOf(pod)) {
				const caps = csc(c).capabilities || {};
				if (!(caps.drop || []).includes("ALL"))
					v.push(`${p}.securityContext.capabilities.drop`);
				for (const cap of caps.add || [])
					if (cap !== "NET_BIND_SERVICE")
						v.push(`${p}.securityContext.capabilities.add: ${cap}`);
			}
		},
	},
];

// {level, violations}: "restricted" when it meets both, "baseline", or "privileged" (meets neither).
export function level(pod) {
	const run = (rules) => rules.flatMap((r) => {
		const v = [];
		r.check(pod, v);
		return v.map((x) => `${r.control}: ${x}`);
	});
	const b = run(BASELINE), r = run(RESTRICTED);
	return { level: b.length ? "privileged" : r.length ? "baseline" : "restricted", baseline: b, restricted: r };
}
