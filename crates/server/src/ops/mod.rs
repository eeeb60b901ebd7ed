//! Internal operations: one struct per RPC, carrying the newest version's semantics. Every API
//! version's request converts into one of these (see [`crate::versions`]). Each struct is written
//! out in its group's file; [`op!`] only implements [`crate::call::Op`] for it.

pub mod disk;
pub mod filesystem;
pub mod iscsi;
pub mod smb;
pub mod system;
pub mod volume;

/// Implements [`crate::call::Op`] for the operation struct `$name` (written out above the call):
/// its output comes straight from the host call in the closure. What the call holds while that
/// host work runs (see [`crate::call::Op::serial`]):
/// - `read_only`: nothing, it changes nothing ([`Serial::ReadOnly`]);
/// - `own_turns`: nothing from the server, the host work takes its own turns or is one OS call
///   ([`Serial::OwnTurns`]);
/// - `serial |s| ..`: what the closure says.
///
/// `quick` after `read_only` or `own_turns` marks host work of a few metadata syscalls (see
/// [`crate::call::Op::quick`]).
///
/// Every operation that is not `read_only` must implement [`crate::dry_run::Plan`] (written out
/// beside it): its [`crate::call::Op::plan`] is that. Every operation must implement
/// [`crate::policy::args::Args`]: what it names, for the authorization policy.
///
/// [`Serial::ReadOnly`]: crate::locks::Serial::ReadOnly
/// [`Serial::OwnTurns`]: crate::locks::Serial::OwnTurns
macro_rules! op {
    ($name:ident -> $out:ty, read_only, |$s:ident, $ctx:ident| $body:expr) => {
        $crate::ops::op!(@ $name -> $out, serial |_s| Ok($crate::locks::Serial::ReadOnly), quick false, plan none, |$s, $ctx| $body);
    };
    ($name:ident -> $out:ty, read_only quick, |$s:ident, $ctx:ident| $body:expr) => {
        $crate::ops::op!(@ $name -> $out, serial |_s| Ok($crate::locks::Serial::ReadOnly), quick true, plan none, |$s, $ctx| $body);
    };
    ($name:ident -> $out:ty, own_turns, |$s:ident, $ctx:ident| $body:expr) => {
        $crate::ops::op!(@ $name -> $out, serial |_s| Ok($crate::locks::Serial::OwnTurns), quick false, plan own, |$s, $ctx| $body);
    };
    ($name:ident -> $out:ty, own_turns quick, |$s:ident, $ctx:ident| $body:expr) => {
        $crate::ops::op!(@ $name -> $out, serial |_s| Ok($crate::locks::Serial::OwnTurns), quick true, plan own, |$s, $ctx| $body);
    };
    ($name:ident -> $out:ty, serial |$ss:ident| $serial:expr, |$s:ident, $ctx:ident| $body:expr) => {
        $crate::ops::op!(@ $name -> $out, serial |$ss| $serial, quick false, plan own, |$s, $ctx| $body);
    };
    (@ $name:ident -> $out:ty,
     serial |$ss:ident| $serial:expr, quick $quick:literal, plan $plan:ident, |$s:ident, $ctx:ident| $body:expr) => {
        impl $crate::call::Op for $name {
            type Output = $out;
            fn serial(&self) -> csi_proxy_host::Result<$crate::locks::Serial> {
                let $ss = self;
                $serial
            }
            fn quick(&self) -> bool {
                $quick
            }
            fn run(self, $ctx: &$crate::Context) -> csi_proxy_host::Result<$out> {
                let $s = self;
                $body
            }
            fn args(&self) -> Vec<$crate::policy::args::Arg<'_>> {
                $crate::policy::args::Args::args(self)
            }
            $crate::ops::op!(@plan $plan);
        }
    };
    (@plan none) => {};
    (@plan own) => {
        fn plan(&self, look: &$crate::dry_run::Look<'_>) -> csi_proxy_host::Result<String> {
            $crate::dry_run::Plan::plan(self, look)
        }
    };
}
pub(crate) use op;
