//! The seccomp filter that keeps a sandboxed command off the network, assembled in the parent.
//!
//! `socket()` is allowed only for local families (unix and netlink sockets); every other family
//! (inet, inet6, packet, vsock, …) fails with EPERM, as does `io_uring_setup` (io_uring can open
//! and connect sockets without the `socket` syscall). A syscall made under another architecture
//! (32-bit compat, or x32 on x86-64) kills the process: its numbers differ and the filter could
//! not judge it.

/// `offsetof(struct seccomp_data, nr)`.
const NR: u32 = 0;
/// `offsetof(struct seccomp_data, arch)`.
const ARCH: u32 = 4;
/// `offsetof(struct seccomp_data, args[0])`, low half on a little-endian machine; `socket()`'s
/// domain is an `int`, so the kernel looks at nothing else.
const ARG0_LOW: u32 = 16;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// Whether this build knows its architecture's seccomp numbers.
pub(crate) const SUPPORTED: bool = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));

/// Socket families that stay allowed: local, not network.
const LOCAL_FAMILIES: [u32; 2] = [libc::AF_UNIX as u32, libc::AF_NETLINK as u32];

enum Insn {
    Load(u32),
    /// Jump to `label` when the accumulator equals the value, else fall through.
    JumpIfEq(u32, &'static str),
    #[cfg_attr(
        not(target_arch = "x86_64"),
        expect(dead_code, reason = "only x86-64 has x32")
    )]
    JumpIfGe(u32, &'static str),
    Ret(u32),
    Label(&'static str),
}

/// The network filter for this architecture, or `None` where the crate does not know the
/// syscall numbers (the caller then cannot enforce "no network" and says so).
pub(crate) fn network_filter() -> Option<Vec<libc::sock_filter>> {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        let errno = libc::SECCOMP_RET_ERRNO | (libc::EPERM as u32 & libc::SECCOMP_RET_DATA);
        let mut program = vec![
            Insn::Load(ARCH),
            Insn::JumpIfEq(AUDIT_ARCH, "native"),
            Insn::Ret(libc::SECCOMP_RET_KILL_PROCESS),
            Insn::Label("native"),
            Insn::Load(NR),
        ];
        #[cfg(target_arch = "x86_64")]
        program.push(Insn::JumpIfGe(0x4000_0000, "kill"));
        program.extend([
            Insn::JumpIfEq(libc::SYS_io_uring_setup as u32, "deny"),
            Insn::JumpIfEq(libc::SYS_socket as u32, "socket"),
            Insn::Ret(libc::SECCOMP_RET_ALLOW),
            Insn::Label("socket"),
            Insn::Load(ARG0_LOW),
        ]);
        for family in LOCAL_FAMILIES {
            program.push(Insn::JumpIfEq(family, "allow"));
        }
        program.extend([
            Insn::Label("deny"),
            Insn::Ret(errno),
            Insn::Label("allow"),
            Insn::Ret(libc::SECCOMP_RET_ALLOW),
            Insn::Label("kill"),
            Insn::Ret(libc::SECCOMP_RET_KILL_PROCESS),
        ]);
        assemble(&program)
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        None
    }
}

/// Resolves labels into the classic-BPF jump offsets (forward only, as BPF requires).
fn assemble(program: &[Insn]) -> Option<Vec<libc::sock_filter>> {
    let mut labels = Vec::new();
    let mut index = 0usize;
    for insn in program {
        match insn {
            Insn::Label(name) => labels.push((*name, index)),
            _ => index += 1,
        }
    }
    let target = |name: &str, at: usize| -> Option<u8> {
        let (_, to) = labels.iter().find(|(label, _)| *label == name)?;
        u8::try_from(to.checked_sub(at + 1)?).ok()
    };
    let mut out = Vec::new();
    for insn in program {
        let at = out.len();
        let (code, jt, jf, k) = match insn {
            Insn::Label(_) => continue,
            Insn::Load(offset) => (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0, 0, *offset),
            Insn::JumpIfEq(value, label) => (
                libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
                target(label, at)?,
                0,
                *value,
            ),
            Insn::JumpIfGe(value, label) => (
                libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K,
                target(label, at)?,
                0,
                *value,
            ),
            Insn::Ret(value) => (libc::BPF_RET | libc::BPF_K, 0, 0, *value),
        };
        out.push(libc::sock_filter {
            code: code as u16,
            jt,
            jf,
            k,
        });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_assembles_with_forward_jumps_only() {
        let filter = network_filter();
        assert_eq!(filter.is_some(), SUPPORTED);
        if let Some(filter) = filter {
            assert!(filter.len() > 8);
            for (i, insn) in filter.iter().enumerate() {
                if u32::from(insn.code) & 0x07 == libc::BPF_JMP {
                    let to = i + 1 + usize::from(insn.jt);
                    assert!(to < filter.len(), "jump past the end at {i}");
                }
            }
            // The program ends in a return, so no path falls off it.
            let last = filter.last().map(|insn| insn.code);
            assert_eq!(last, Some((libc::BPF_RET | libc::BPF_K) as u16));
        }
    }

    #[test]
    fn an_unknown_label_fails_to_assemble() {
        assert!(assemble(&[Insn::JumpIfEq(1, "nowhere"), Insn::Ret(0)]).is_none());
    }
}
