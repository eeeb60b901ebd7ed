//! Internal operations: one struct per RPC, carrying the newest version's semantics. Every API
//! version's request converts into one of these (see [`crate::versions`]).

pub mod disk;
pub mod filesystem;
pub mod iscsi;
pub mod smb;
pub mod system;
pub mod volume;

/// Declares an operation whose output comes straight from one host call; `serial |s| ..` says
/// what it holds while that call runs (see [`crate::call::Op::serial`]), and `quick` marks host
/// work of a few metadata syscalls (see [`crate::call::Op::quick`]).
macro_rules! op {
    ($(#[$m:meta])* $name:ident { $($field:ident : $ty:ty),* $(,)? } -> $out:ty,
     |$s:ident, $ctx:ident| $body:expr) => {
        $crate::ops::op!(@ $(#[$m])* $name { $($field : $ty),* } -> $out,
            serial |_s| Ok($crate::locks::Serial::None), quick false, |$s, $ctx| $body);
    };
    ($(#[$m:meta])* $name:ident { $($field:ident : $ty:ty),* $(,)? } -> $out:ty,
     quick |$s:ident, $ctx:ident| $body:expr) => {
        $crate::ops::op!(@ $(#[$m])* $name { $($field : $ty),* } -> $out,
            serial |_s| Ok($crate::locks::Serial::None), quick true, |$s, $ctx| $body);
    };
    ($(#[$m:meta])* $name:ident { $($field:ident : $ty:ty),* $(,)? } -> $out:ty,
     serial |$ss:ident| $serial:expr, |$s:ident, $ctx:ident| $body:expr) => {
        $crate::ops::op!(@ $(#[$m])* $name { $($field : $ty),* } -> $out,
            serial |$ss| $serial, quick false, |$s, $ctx| $body);
    };
    (@ $(#[$m:meta])* $name:ident { $($field:ident : $ty:ty),* $(,)? } -> $out:ty,
     serial |$ss:ident| $serial:expr, quick $quick:literal, |$s:ident, $ctx:ident| $body:expr) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq)]
        pub struct $name { $(pub $field: $ty),* }

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
        }
    };
}
pub(crate) use op;
