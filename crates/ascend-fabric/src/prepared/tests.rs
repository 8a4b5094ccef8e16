use super::*;

#[test]
fn blocks_number_across_ranges_in_order() {
    // Uniform: two ranges of 3 blocks each.
    let m = BlockMap::new(100, [(1000, 350, Some((4, 0))), (5000, 300, Some((7, 20)))]).unwrap();
    assert_eq!((m.count, m.per_range, m.ranges()), (6, 3, 2));
    let (r, off) = m.locate(4);
    assert_eq!((r.addr, r.entry, r.off, off), (5000, 7, 20, 100));
    assert_eq!(m.first_block(1), Some(3));
    // Not uniform: found by search.
    let m = BlockMap::new(
        100,
        [(0, 100, None), (900, 250, Some((1, 0))), (7000, 100, None)],
    )
    .unwrap();
    assert_eq!((m.count, m.per_range), (4, 0));
    let got: Vec<(u64, u64)> = (0..4)
        .map(|k| {
            let (r, off) = m.locate(k);
            (r.addr, off)
        })
        .collect();
    assert_eq!(got, [(0, 0), (900, 0), (900, 100), (7000, 0)]);
    assert_eq!(m.locate(0).0.entry, CROSSES);
    // A range without a whole block is named.
    assert_eq!(
        BlockMap::new(100, [(0, 100, None), (900, 99, None)]).unwrap_err(),
        (1, 99)
    );
}
