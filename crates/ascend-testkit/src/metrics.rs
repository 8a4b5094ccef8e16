//! What a debugging recorder (`metrics-util`'s) recorded, as series a test can look up by
//! name and labels.

use metrics_util::debugging::Snapshotter;

pub use metrics_util::debugging::{DebugValue, DebuggingRecorder};

/// One recorded series: its name, labels and value.
#[derive(Debug)]
pub struct Series {
    /// The metric's name.
    pub name: String,
    /// Its labels, sorted by name.
    pub labels: Vec<(String, String)>,
    /// Its value.
    pub value: DebugValue,
}

/// Every series of one snapshot.
#[derive(Debug)]
pub struct Recorded(Vec<Series>);

impl Recorded {
    /// A snapshot of what `snap`'s recorder holds now (a debugging recorder's histograms are
    /// drained by it: take one snapshot per check).
    pub fn take(snap: &Snapshotter) -> Recorded {
        let series = snap
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(k, _, _, value)| {
                let key = k.key();
                let mut labels: Vec<(String, String)> = key
                    .labels()
                    .map(|l| (l.key().to_owned(), l.value().to_owned()))
                    .collect();
                labels.sort();
                Series {
                    name: key.name().to_owned(),
                    labels,
                    value,
                }
            });
        Recorded(series.collect())
    }

    /// The series named `name`.
    pub fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Series> {
        self.0.iter().filter(move |s| s.name == name)
    }

    /// The one series named `name` that has every label of `labels` (it may have more).
    ///
    /// # Panics
    /// When none has them, or more than one does (the test named too few labels).
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> &DebugValue {
        let has = |s: &&Series| {
            labels
                .iter()
                .all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v))
        };
        let mut hits = self.0.iter().filter(|s| s.name == name).filter(has);
        let first = hits
            .next()
            .unwrap_or_else(|| panic!("no series {name} {labels:?} among {:?}", self.0));
        assert!(
            hits.next().is_none(),
            "more than one series {name} {labels:?}"
        );
        &first.value
    }

    /// The counter `name` with `labels`.
    ///
    /// # Panics
    /// As [`Recorded::get`], and when it is not a counter.
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        match self.get(name, labels) {
            DebugValue::Counter(c) => *c,
            other => panic!("{name} {labels:?} is not a counter: {other:?}"),
        }
    }

    /// The gauge `name` with `labels`.
    ///
    /// # Panics
    /// As [`Recorded::get`], and when it is not a gauge.
    pub fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        match self.get(name, labels) {
            DebugValue::Gauge(g) => g.into_inner(),
            other => panic!("{name} {labels:?} is not a gauge: {other:?}"),
        }
    }

    /// The samples of the histogram `name` with `labels`.
    ///
    /// # Panics
    /// As [`Recorded::get`], and when it is not a histogram.
    pub fn samples(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        match self.get(name, labels) {
            DebugValue::Histogram(v) => v.iter().map(|x| x.into_inner()).collect(),
            other => panic!("{name} {labels:?} is not a histogram: {other:?}"),
        }
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
