//! Properties of the plan, against simple models: the descriptor checks, the translation into
//! pieces (with and without the remote index), and the dealing of pieces to streams.

use super::*;
use crate::remote::SegIndex;
use ascend_mem::Addr;
use proptest::prelude::*;

/// Segments laid out from `base`: each `(gap, len)` leaves `gap` bytes free (0: adjacent to
/// the previous one), then takes `len` bytes. The values are the segments' indexes.
fn layout(base: u64, spans: &[(u64, u64)]) -> RangeMap<usize> {
    let mut map = RangeMap::new();
    let mut at = base;
    for (i, &(gap, len)) in spans.iter().enumerate() {
        at += gap;
        map.insert(at, len, i).unwrap();
        at += len;
    }
    map
}

fn spans() -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec((prop_oneof![Just(0u64), 1u64..64], 1u64..256), 1..12)
}

/// The first address of `[addr, addr + len)` no segment covers.
fn first_uncovered<V>(map: &RangeMap<V>, addr: u64, len: u64) -> Option<u64> {
    (addr..addr + len).find(|&x| map.find(x).is_none())
}

/// A descriptor side somewhere around `map`: offset and length in units of the map's span.
fn around<V>(map: &RangeMap<V>, at: f64, len: f64) -> (u64, u64) {
    let segs = map.segments();
    let (lo, hi) = (segs[0].start - 8, segs[segs.len() - 1].end() + 8);
    let addr = lo + ((hi - lo) as f64 * at) as u64;
    let len = 1 + ((hi - addr) as f64 * len) as u64;
    (addr, len.min(hi - addr).max(1))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn check_descs_matches_its_model(
        descs in prop::collection::vec(
            (prop_oneof![any::<u64>(), 0u64..1 << 20], prop_oneof![any::<u64>(), 0u64..1 << 20],
             prop_oneof![Just(0u64), any::<u64>(), 1u64..4096]),
            0..8,
        )
    ) {
        let descs: Vec<TransferDesc> =
            descs.iter().map(|&(l, r, n)| TransferDesc::raw(Addr::new(l), Addr::new(r), n as usize)).collect();
        let got = check_descs(&descs);
        if descs.is_empty() {
            prop_assert!(matches!(got, Err(Error::EmptyBatch)));
            return Ok(());
        }
        // The first bad descriptor decides: a zero length, else the local side's overflow,
        // else the remote side's.
        for (index, d) in descs.iter().enumerate() {
            if d.len == 0 {
                let ok = matches!(got, Err(Error::ZeroLength { index: i }) if i == index);
                prop_assert!(ok, "{got:?}");
                return Ok(());
            }
            let side = if d.local_addr.checked_add(d.len).is_none() {
                Some((Side::Local, d.local_addr))
            } else if d.remote_addr.checked_add(d.len).is_none() {
                Some((Side::Remote, d.remote_addr))
            } else {
                None
            };
            if let Some((side, addr)) = side {
                let ok = matches!(got, Err(Error::Overflow { index: i, side: s, addr: a, len })
                    if i == index && s == side && a == addr && len == d.len);
                prop_assert!(ok, "{got:?}");
                return Ok(());
            }
        }
        let total = descs.iter().fold(0u64, |t, d| t.saturating_add(d.len as u64));
        prop_assert_eq!(got.unwrap(), total);
    }

    #[test]
    fn translate_covers_every_byte_once_or_names_the_first_gap(
        lspans in spans(),
        rspans in spans(),
        picks in prop::collection::vec((0.0..1.0f64, 0.0..0.5f64, 0.0..1.0f64, 0.0..0.5f64), 1..6),
    ) {
        let local = layout(0x10_000, &lspans);
        let remote = layout(0x90_000, &rspans);
        let descs: Vec<TransferDesc> = picks
            .iter()
            .map(|&(la, ll, ra, rl)| {
                let (l, n) = around(&local, la, ll);
                let (r, m) = around(&remote, ra, rl);
                TransferDesc::raw(Addr::new(l), Addr::new(r), n.min(m) as usize)
            })
            .collect();
        let mut seen = Vec::new();
        let mut out = Vec::new();
        let got = translate_in(&descs, &local, |i| seen.push(*i), (&remote, |i, _| i), &SegIndex::new(&remote), &mut out)
            .map(|()| out);

        // Without the index every lookup goes through the map: the same answer.
        let mut out = Vec::new();
        let slow = translate_in(&descs, &local, |_| {}, (&remote, |i, _| i), &SegIndex::default(), &mut out)
            .map(|()| out);
        prop_assert_eq!(format!("{got:?}"), format!("{slow:?}"));

        let gap = descs.iter().enumerate().find_map(|(index, d)| {
            first_uncovered(&local, d.local_addr.get(), d.len as u64)
                .map(|u| (index, Side::Local, d.local_addr, Addr::new(u)))
                .or_else(|| {
                    first_uncovered(&remote, d.remote_addr.get(), d.len as u64)
                        .map(|u| (index, Side::Remote, d.remote_addr, Addr::new(u)))
                })
        });
        if let Some((index, side, addr, uncovered)) = gap {
            let ok = matches!(&got, Err(Error::NotRegistered { index: i, side: s, addr: a, len, uncovered: u })
                if *i == index && *s == side && *a == addr && *len == descs[index].len && *u == uncovered);
            prop_assert!(ok, "expected the gap {:?}, got {got:?}", (index, side, addr, uncovered));
            return Ok(());
        }
        let pieces = got.unwrap();
        // Walk the descriptors through the pieces: each piece lies in one local and one
        // remote segment and continues where the last one ended, until the length is used up.
        let mut it = pieces.iter();
        for d in &descs {
            let (mut l, mut r, mut left) = (d.local_addr.get(), d.remote_addr.get(), d.len as u64);
            while left > 0 {
                let p = it.next().expect("pieces run out before the descriptor's end");
                let (ls, rs) = (&local.segments()[p.l_idx], &remote.segments()[p.r_idx]);
                prop_assert!(p.len > 0 && p.len <= left);
                prop_assert_eq!(ls.start + p.l_off, l);
                prop_assert_eq!(rs.start + p.r_off, r);
                prop_assert!(p.l_off + p.len <= ls.len && p.r_off + p.len <= rs.len);
                prop_assert!(seen.contains(&p.l_idx));
                (l, r, left) = (l + p.len, r + p.len, left - p.len);
            }
        }
        prop_assert!(it.next().is_none(), "pieces left over");
    }

    #[test]
    fn deal_moves_every_byte_once_spread_round_robin(
        raw in prop::collection::vec(
            (0usize..3, 0u64..1 << 22, 0usize..3, 0u64..1 << 22,
             prop_oneof![1u64..8192, 1u64 << 20..3 << 20]),
            0..10,
        ),
        streams in 0usize..9,
        write in any::<bool>(),
        adjacent in any::<bool>(),
    ) {
        // Pieces as translate makes them: optionally each one continuing the last on both
        // sides (which deal coalesces).
        let mut pieces: Vec<Piece> = Vec::new();
        for (desc, &(l_idx, l_off, r_idx, r_off, len)) in raw.iter().enumerate() {
            let desc = desc as u32;
            let p = match pieces.last() {
                Some(q) if adjacent => Piece { desc, l_off: q.l_off + q.len, r_off: q.r_off + q.len, len, ..*q },
                _ => Piece { desc, l_idx, l_off, r_idx, r_off, len },
            };
            pieces.push(p);
        }
        let (batches, used) = deal(pieces.clone(), streams, write);
        // Every remote slot a piece lies in is marked, and no other (slots here are below 128).
        for slot in 0..3 {
            let in_use = pieces.iter().any(|p| p.r_idx == slot);
            prop_assert_eq!(used.any(&[slot]), in_use, "slot {}", slot);
        }
        let k = streams.max(1);
        prop_assert_eq!(batches.len(), k);
        prop_assert!(batches.iter().all(|b| b.descs.len() == b.copies.len()));
        let lens: Vec<usize> = batches.iter().map(|b| b.copies.len()).collect();
        let (min, max) = (lens.iter().min().unwrap(), lens.iter().max().unwrap());
        prop_assert!(max - min <= 1, "round robin: {:?}", lens);

        // The copies in the order they were dealt, as pieces again.
        let n: usize = lens.iter().sum();
        let mut next = vec![0usize; k];
        let copies: Vec<Piece> = (0..n)
            .map(|rr| {
                let b = &batches[rr % k];
                let (c, desc) = (&b.copies[next[rr % k]], b.descs[next[rr % k]]);
                next[rr % k] += 1;
                let ((l_idx, l_off), (r_idx, r_off)) = if write {
                    ((c.src, c.src_offset), (c.dst, c.dst_offset))
                } else {
                    ((c.dst, c.dst_offset), (c.src, c.src_offset))
                };
                Piece { desc, l_idx, l_off: l_off as u64, r_idx, r_off: r_off as u64, len: c.len as u64 }
            })
            .collect();
        prop_assert!(copies.iter().all(|c| c.len > 0));

        // Same bytes, same order: the coalesced copies are the coalesced pieces, each part
        // naming the descriptor its coalesced run starts in.
        let want = coalesce(&pieces);
        prop_assert_eq!(coalesce(&copies), want.clone());

        // A piece under SPLIT_MIN is one copy; a larger one at most one per stream, each but
        // the last a whole number of pages.
        let mut c = copies.iter();
        for p in &want {
            let mut parts = Vec::new();
            let mut got = 0;
            while got < p.len {
                let x = c.next().unwrap();
                parts.push(x.len);
                got += x.len;
            }
            prop_assert_eq!(got, p.len);
            if (p.len as usize) < SPLIT_MIN || k == 1 {
                prop_assert_eq!(parts.len(), 1);
            } else {
                prop_assert!(parts.len() <= k);
                prop_assert!(parts[..parts.len() - 1].iter().all(|n| n % 4096 == 0));
            }
        }
    }
}

/// The streams' batches of `pieces`, dealt as a submission deals them, and the remote slots
/// marked used.
fn deal(pieces: Vec<Piece>, streams: usize, write: bool) -> (Vec<StreamBatch>, SegMask) {
    let mut used = SegMask::default();
    let mut dealer = Dealer::new(streams, write, pieces.len(), &mut used);
    for p in pieces {
        dealer.piece(p);
    }
    (dealer.finish(), used)
}

/// Merges pieces that continue each other on both sides.
fn coalesce(pieces: &[Piece]) -> Vec<Piece> {
    let mut out: Vec<Piece> = Vec::new();
    for &p in pieces {
        match out.last_mut() {
            Some(q)
                if q.l_idx == p.l_idx
                    && q.r_idx == p.r_idx
                    && q.l_off + q.len == p.l_off
                    && q.r_off + q.len == p.r_off =>
            {
                q.len += p.len
            }
            _ => out.push(p),
        }
    }
    out
}

#[test]
fn the_slot_mask_keeps_each_slot_below_128_and_one_bit_for_the_rest() {
    let mut m = SegMask::default();
    assert!(!m.any(&[0, 63, 64, 127, 128, 500]));
    for s in [0, 63, 64, 127] {
        m.add(s);
        assert!(m.any(&[s]), "slot {s}");
    }
    assert!(!m.any(&[1, 62, 65, 126, 128, 500]));
    m.add(300);
    // Every slot from 128 on counts as used once one is.
    assert!(m.any(&[128]) && m.any(&[9999]));
    assert!(!m.any(&[1, 2, 100]));
}
