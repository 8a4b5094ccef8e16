//! Registrations that come and go between transfers: the engine's copy table of its local
//! segments is rebuilt after every change (a registration made or removed after a transfer
//! used the table is seen by the next one), a transfer submitted before a change completes,
//! and nothing leaks.

use ascend_fabric::Addr;
use std::time::Duration;

use crate::peer::*;
use crate::util::*;
use ascend_fabric::{Engine, Error, Side, TransferDesc, TransferOp};
use ascend_mem::prelude::*;

const T: Duration = Duration::from_secs(5);
const N: usize = 64 << 10;

#[test]
fn local_registrations_added_and_removed_between_transfers() {
    let env = setup();
    let a_addr = format!("127.0.0.1:{}", free_port());
    {
        let a = Engine::new(&env.dev, &a_addr, test_options(2)).unwrap();
        let b = Engine::new(&env.dev, "127.0.0.1", test_options(2)).unwrap();
        let target = a.alloc_device(REGION).unwrap();
        let _t_reg = a.register(&target).unwrap();
        let ra = target.addr();
        b.connect(&a_addr, T).unwrap();

        let one = b.alloc_device(MIB2).unwrap();
        let two = b.alloc_host(MIB2).unwrap();
        one.write_from(&pattern(1, N), 0).unwrap();
        two.write_from(&pattern(2, N), 0).unwrap();
        let (l1, l2) = (one.addr(), two.addr());
        let write = |l: Addr, r: Addr| {
            b.transfer_sync(&a_addr, TransferOp::Write, &[TransferDesc::raw(l, r, N)], T)
        };
        let at = |off: usize| {
            let mut v = vec![0u8; N];
            target.read_into(&mut v, off).unwrap();
            v
        };

        let reg1 = b.register(&one).unwrap();
        write(l1, ra).unwrap();
        assert!(at(0) == pattern(1, N));
        // Not registered yet: refused, naming the local side.
        let e = write(l2, ra + N).unwrap_err();
        assert!(
            matches!(e, Error::NotRegistered { index: 0, side: Side::Local, addr, .. } if addr == l2),
            "{e:?}"
        );
        // Registered after a transfer used the engine's table: the next transfer sees it.
        let reg2 = b.register(&two).unwrap();
        write(l2, ra + N).unwrap();
        assert!(at(N) == pattern(2, N));

        // A transfer in flight from `one` while `two` is deregistered and registered again:
        // it completes, and the new registration serves the next transfer.
        two.write_from(&pattern(3, N), 0).unwrap();
        let req = b
            .transfer_async(
                &a_addr,
                TransferOp::Write,
                &[TransferDesc::raw(l1, ra + 2 * N, N)],
            )
            .unwrap();
        b.deregister(reg2).unwrap();
        let e = write(l2, ra + 3 * N).unwrap_err();
        assert!(
            matches!(
                e,
                Error::NotRegistered {
                    side: Side::Local,
                    ..
                }
            ),
            "{e:?}"
        );
        let reg2 = b.register(&two).unwrap();
        req.wait(T).unwrap();
        write(l2, ra + 3 * N).unwrap();
        assert!(at(2 * N) == pattern(1, N));
        assert!(at(3 * N) == pattern(3, N));

        // Dropping a registration removes it as well.
        drop(reg1);
        let e = write(l1, ra).unwrap_err();
        assert!(
            matches!(
                e,
                Error::NotRegistered {
                    side: Side::Local,
                    ..
                }
            ),
            "{e:?}"
        );
        drop(reg2);
        b.disconnect(&a_addr, T).unwrap();
    }
    env.finish();
}
