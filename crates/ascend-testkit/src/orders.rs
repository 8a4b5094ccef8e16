//! Every order of three things (a reservation, its memory and their mapping, say), for tests
//! that drop or close them in each.

/// The six orders of three items, by index.
pub const ORDERS_OF_THREE: [[usize; 3]; 6] = [
    [0, 1, 2],
    [0, 2, 1],
    [1, 0, 2],
    [1, 2, 0],
    [2, 0, 1],
    [2, 1, 0],
];
