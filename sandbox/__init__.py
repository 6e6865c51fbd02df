"""The isolation boundary: every line of generated environment code runs here, inside nsjail.

Threat model
============

The adversary is the environment source a language model wrote: buggy, hostile by accident (a busy loop,
a memory blow-up, a print storm) or on purpose (trying to read credentials, reach the network, escape,
kill the pipeline, or forge its own results).

Covered:
- Host secrets: the jail starts with an empty environment plus fixed variables (no AWS_*, tokens, HOME);
  no /etc, /home, /root, /proc or project files are mounted; only /usr (read-only), a private copy of the
  runtime (read-only) and /dev/null, /dev/zero, /dev/urandom.
- Network: a fresh network namespace with no interfaces to the host; the host's loopback services and
  metadata endpoints are unreachable.
- Host processes: new PID namespace (the host's processes are invisible and unsignalable), uid/gid
  65534 in a user namespace, no new privileges.
- Host files: read-only binds; writes go to a private, size-capped tmpfs /tmp that disappears with the
  jail; RLIMIT_FSIZE caps any file.
- Resources: RLIMIT_AS (MemoryError -> ``memory``), cgroup memory and pids limits where the host offers
  cgroups (fork bombs, OOM -> ``memory``), RLIMIT_NPROC otherwise, RLIMIT_CPU, a wall-clock limit per
  jail and a timeout per call (-> ``timeout``); the jail is killed whole, nothing outlives ``close()``.
- The protocol: replies travel on private duplicates of the pipes; the environment's fd 0/1 are
  /dev/null and stderr, ``sys.stdout`` is a capped buffer (a call that prints over 1 MiB fails at once,
  -> ``output_limit``), and frames are length-prefixed and size-capped (-> ``output_limit``), so prints
  cannot corrupt or forge a frame; patching ``json`` or ``struct`` from
  inside does not reach the host's private references.
- Results: every failure is a classified :class:`~sandbox.jail.CallResult`, never an exception in the
  pipeline, its ``error_type`` one of the taxonomy in :mod:`sandbox.outcome` (an unknown name in a reply
  becomes ``jail_error``); a dead jail is classified from its exit status and nsjail's own log, which
  travels on a private pipe the jail cannot write to. If nsjail cannot start,
  :class:`~sandbox.policy.SandboxUnavailable` says why in one line and nothing runs unjailed.

Not covered:
- Kernel exploits: nsjail shares the host kernel; a kernel bug reachable from an unprivileged user
  namespace could escape. No seccomp syscall filter is applied yet.
- Deliberate in-process forgery: code in the jail runs in the same interpreter as ``host.py`` and could,
  with effort (introspection, writing to the protocol descriptor), forge its own replies. It can only lie
  about its own environment, which it can do anyway by returning reward 1; the validator's ``trivial``
  check and the hinted/unhinted gap are the defence, not the jail.
- Side channels (timing, CPU contention between parallel jails) and reading /usr (public system files).
- Denial of service within limits: a jail may burn its CPU and wall-clock budget.
"""
