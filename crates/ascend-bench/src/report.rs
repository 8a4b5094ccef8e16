//! Tables, CSV files, the SVG plot and the RESULT line.

use std::fmt::Write as _;
use std::path::Path;

use ascend_fabric::TransferOp;
use plotters::prelude::*;

use crate::collectives::Coll;
use crate::hixl::{Cell, Dir, BLOCKS};
use crate::transfer::{Latency, Pattern, Row, SIZES};
use crate::util::{fmt_opt, ratio, size_name};
use crate::{Res, Results};

fn find(res: &Results, p: Pattern, op: TransferOp, block: usize) -> Option<&Row> {
    find_in(res, p, op, block, false)
}

/// The row measured with an HBM (`host` false) or host-DRAM local buffer.
fn find_in(res: &Results, p: Pattern, op: TransferOp, block: usize, host: bool) -> Option<&Row> {
    res.transfer
        .iter()
        .find(|r| r.pattern == p && r.op == op && r.block == block && r.local_host == host)
}

fn coll(res: &Results, c: Coll, sym: bool) -> Option<&crate::collectives::Row> {
    res.collectives
        .iter()
        .find(|r| r.coll == c && r.symmetric == sym)
}

/// The RESULT keys and values, in order.
pub(crate) fn result_pairs(res: &Results) -> Vec<(&'static str, Option<f64>)> {
    let walk = |op, b| find(res, Pattern::Walk, op, b).map(Row::vs_memcpy);
    let ucx = |b| find(res, Pattern::Repeat, TransferOp::Write, b).and_then(Row::vs_ucx);
    let row = |n, host| {
        res.translate
            .iter()
            .find(|r| r.segments == n && r.host == host)
    };
    let tr = |n| row(n, false).map(|r| r.submit_ns);
    let ag = ratio(
        coll(res, Coll::AllGather, false).map(|r| r.time.as_secs_f64()),
        coll(res, Coll::AllGather, true).map(|r| r.time.as_secs_f64()),
    );
    let prep = |n| row(n, false).and_then(|r| r.prepared_ns);
    let floor = |n| row(n, false).map(|r| r.floor_ns);
    let host_raw = row(1, true).map(|r| r.submit_ns);
    let host_prep = row(1, true).and_then(|r| r.prepared_ns);
    let lat = res.latency;
    let hixl = res.hixl.as_ref();
    let a2a = ratio(
        coll(res, Coll::AllToAll, false).map(|r| r.time.as_secs_f64()),
        coll(res, Coll::AllToAll, true).map(|r| r.time.as_secs_f64()),
    );
    let mut pairs = vec![
        ("write_64MiB_vs_memcpy", walk(TransferOp::Write, 64 << 20)),
        ("read_64MiB_vs_memcpy", walk(TransferOp::Read, 64 << 20)),
        ("write_4KiB_ops_vs_memcpy", walk(TransferOp::Write, 4 << 10)),
        ("write_1MiB_vs_ucx", ucx(1 << 20)),
        ("write_64MiB_vs_ucx", ucx(64 << 20)),
        ("translate_10k_vs_1", ratio(tr(10_000), tr(1))),
        ("translate_prepared_10k_vs_1", ratio(prep(10_000), prep(1))),
        ("prepared_vs_raw_submit", ratio(prep(1), tr(1))),
        ("host_batched_vs_raw_submit", ratio(host_raw, tr(1))),
        ("host_prepared_vs_raw_submit", ratio(host_prep, host_raw)),
        ("walk_1MiB_vs_memcpy", walk(TransferOp::Write, 1 << 20)),
        ("submit_vs_runtime_floor", ratio(tr(1), floor(1))),
        ("submit_prepared_vs_runtime_floor", ratio(prep(1), floor(1))),
        (
            "submit_10k_vs_runtime_floor",
            ratio(tr(10_000), floor(10_000)),
        ),
        (
            "submit_prepared_10k_vs_runtime_floor",
            ratio(prep(10_000), floor(10_000)),
        ),
        ("repeat_4KiB_vs_ucx", ucx(4 << 10)),
        (
            "repeat_4KiB_host_vs_ucx",
            find_in(res, Pattern::Repeat, TransferOp::Write, 4 << 10, true).and_then(Row::vs_ucx),
        ),
        (
            "lat_4KiB_p50_vs_ucx",
            lat.and_then(|l| ratio(Some(l.p50_us), l.ucx_us)),
        ),
        ("lat_4KiB_p50_us", lat.map(|l| l.p50_us)),
        ("lat_4KiB_p99_us", lat.map(|l| l.p99_us)),
        ("allgather_sym_vs_staged", ag),
        ("alltoall_onesided_vs_staged", a2a),
        (
            "peak_rss_over_registered_MiB",
            res.rss.map(|r| r.over_mib()),
        ),
        ("drop_1000_futures_ms", res.cancel.map(|c| c.drop_ms)),
        ("drop_vs_cancel", res.cancel.map(|c| c.drop_vs_cancel())),
        (
            "wait_cpu_vs_floor",
            hixl.and_then(|h| h.wait_cpu)
                .and_then(|(e, f)| ratio(Some(e.as_secs_f64()), Some(f.as_secs_f64()))),
        ),
        (
            "hixl_16K_D2rD_scatter_threads_vs_1",
            hixl.and_then(|h| {
                let t = h.max_threads();
                let at = |n| {
                    h.cell(Dir::D2rD, true, 16 << 10, n)
                        .map(|c| c.step.as_secs_f64())
                };
                (t > 1).then(|| ratio(at(1), at(t))).flatten()
            }),
        ),
        (
            "hixl_min_vs_memcpy",
            hixl.and_then(|h| {
                h.cells
                    .iter()
                    .filter(|c| c.threads == 1)
                    .map(Cell::vs_memcpy)
                    .reduce(f64::min)
            }),
        ),
        ("hixl_call_ns", hixl.map(|h| h.call_ns as f64)),
    ];
    let tel = res.telemetry.as_ref();
    pairs.extend(
        crate::telemetry::SIZES.map(|(size, key)| (key, tel.and_then(|t| t.on_vs_off(size)))),
    );
    pairs
}

/// `RESULT k=v ...`.
pub(crate) fn result_line(res: &Results) -> String {
    let mut s = String::from("RESULT");
    for (k, v) in result_pairs(res) {
        let prec = if k.starts_with("peak_rss") { 1 } else { 3 };
        let _ = write!(s, " {k}={}", fmt_opt(v, prec));
    }
    s
}

/// Prints every table on stdout.
pub(crate) fn print_tables(res: &Results) {
    if !res.transfer.is_empty() {
        print_transfer(res);
    }
    if let Some(l) = res.latency {
        print_latency(&l);
    }
    if let Some(c) = res.cancel {
        println!(
            "cancel: {} futures ({} in flight) dropped on one thread in {:.3} ms (all released after {:.1} ms); cancel() on {} in flight, one after the other: {:.1} ms",
            c.futures, c.in_flight, c.drop_ms, c.released_ms, c.in_flight, c.cancel_ms
        );
    }
    if !res.translate.is_empty() {
        print_translate(res);
    }
    if let Some(h) = &res.hixl {
        print_hixl(h, res.meta.as_ref().map_or(true, |m| m.emulator));
    }
    if !res.collectives.is_empty() {
        print_collectives(res);
    }
    if let Some(t) = &res.telemetry {
        print_telemetry(t);
    }
    for (k, v) in result_pairs(res) {
        println!("{k:<36} {}", fmt_opt(v, 3));
    }
}

/// One line per size: a synchronous WRITE's time without and with a recorder installed.
fn print_telemetry(t: &crate::telemetry::Telemetry) {
    for r in &t.rows {
        println!(
            "metrics: {} WRITE {:.2} us without a recorder, {:.2} us with Prometheus' (x{:.3}, the median of the rounds' ratios)",
            size_name(r.size),
            r.off.as_secs_f64() * 1e6,
            r.on.as_secs_f64() * 1e6,
            r.ratio
        );
    }
}

/// The transfer table, the UCX note and the peak RSS line.
fn print_transfer(res: &Results) {
    let c = res
        .ceiling
        .clone()
        .unwrap_or_else(|| crate::ceiling::CeilingName::memcpy(crate::peer::streams() as usize));
    println!(
        "transfer: engine (2 processes, {} copy streams) vs {} ({} {}, same mapped buffers) vs UCX put",
        crate::peer::streams(),
        c.name,
        c.lanes,
        c.unit
    );
    println!(
        "{:<11} {:<5} {:>7} {:>6} {:>9} {:>12} {:>9} {:>12} {:>8} {:>8} {:>8}",
        "pattern",
        "op",
        "block",
        "batch",
        "eng GB/s",
        "eng desc/s",
        "mcp GB/s",
        "mcp desc/s",
        "vs mcp",
        "UCX GB/s",
        "vs UCX"
    );
    for r in &res.transfer {
        println!(
            "{:<11} {:<5} {:>7} {:>6} {:>9.2} {:>12.0} {:>9.2} {:>12.0} {:>8.3} {:>8} {:>8}",
            r.label(),
            r.op_name(),
            size_name(r.block),
            r.batch,
            r.engine_gbs(),
            r.engine_descs_s(),
            r.memcpy_gbs(),
            r.memcpy_descs_s(),
            r.vs_memcpy(),
            fmt_opt(r.ucx_gbs, 3),
            fmt_opt(r.vs_ucx(), 2)
        );
    }
    if let Some(n) = &res.ucx_note {
        println!("{n}");
    }
    if let Some(r) = res.rss {
        println!(
            "peak RSS: initiator {:.1} MiB (registered touched {:.1} MiB), peer {:.1} MiB (registered touched {:.1} MiB): {:.1} MiB over",
            r.initiator_hwm as f64 / 1048576.0,
            r.initiator_touched as f64 / 1048576.0,
            r.peer_hwm as f64 / 1048576.0,
            r.peer_touched as f64 / 1048576.0,
            r.over_mib()
        );
    }
    println!();
}

/// The latency line.
fn print_latency(l: &Latency) {
    println!(
        "latency of a synchronous 4 KiB WRITE ({} transfers): p50 {:.1} us, p99 {:.1} us; UCX put typical {} us",
        l.n,
        l.p50_us,
        l.p99_us,
        fmt_opt(l.ucx_us, 2)
    );
    println!();
}

/// The translate table.
fn print_translate(res: &Results) {
    println!(
        "translate: host-side cost per 4 KiB descriptor (batches of 1,024; deterministic streams)"
    );
    println!(
        "{:>9} {:>6} {:>14} {:>14} {:>16} {:>13} {:>9} {:>11}",
        "segments",
        "local",
        "submit ns/desc",
        "total ns/desc",
        "prepared ns/desc",
        "floor ns/desc",
        "descs",
        "connect s"
    );
    for r in &res.translate {
        println!(
            "{:>9} {:>6} {:>14.1} {:>14.1} {:>16} {:>13.1} {:>9} {:>11.3}",
            r.segments,
            if r.host { "host" } else { "HBM" },
            r.submit_ns,
            r.total_ns,
            fmt_opt(r.prepared_ns, 1),
            r.floor_ns,
            r.descs,
            r.connect.as_secs_f64()
        );
    }
    println!(
        "(floor: the same copies queued straight through ascend-mem's stream calls, one \
         table batch per stream per 1,024 descriptors)"
    );
    println!();
}

/// The HIXL-shaped table: GB/s, over the ceiling (two-thread memcpy on the emulator), and
/// caller CPU per step.
fn print_hixl(h: &crate::hixl::Report, emulator: bool) {
    let cost = if emulator {
        format!(
            ", {} ns emulated host cost per runtime copy call",
            h.call_ns
        )
    } else {
        String::new()
    };
    let ceiling = match &h.ceiling {
        Some(c) if c.name != "memcpy" => format!("{} on {} {}", c.name, c.lanes, c.unit),
        _ => "two-thread memcpy".to_owned(),
    };
    println!(
        "hixl: HIXL's benchmark shape, one synchronous transfer of the region per step{cost}; \
         cells: GB/s (x {ceiling}) caller CPU ms/step"
    );
    let mut threads: Vec<u32> = h.cells.iter().map(|c| c.threads).collect();
    threads.sort_unstable();
    threads.dedup();
    print!("{:<22}", "dir layout threads");
    for b in BLOCKS {
        print!(" {:>24}", size_name(b));
    }
    println!();
    for dir in Dir::ALL {
        for scatter in [false, true] {
            for &t in &threads {
                let layout = if scatter { "scatter" } else { "contig" };
                print!("{:<22}", format!("{} {layout} {t}", dir.name()));
                for b in BLOCKS {
                    let cell = h.cell(dir, scatter, b, t).map_or("-".into(), |c| {
                        format!(
                            "{:.2} (x{:.2}) {:.3}",
                            c.gbs(),
                            c.vs_memcpy(),
                            c.cpu.as_secs_f64() * 1e3
                        )
                    });
                    print!(" {cell:>24}");
                }
                println!();
            }
        }
    }
    if let Some((e, f)) = h.wait_cpu {
        println!(
            "wait: caller CPU per synchronous 1 MiB WRITE {:.1} us, floor (one blocking \
             synchronize per stream) {:.1} us",
            e.as_secs_f64() * 1e6,
            f.as_secs_f64() * 1e6
        );
    }
    println!();
}

/// The collectives table.
fn print_collectives(res: &Results) {
    println!(
        "collectives: {} ranks (threads of one process), {} MiB fp32 per rank",
        crate::collectives::RANKS,
        crate::collectives::BYTES >> 20
    );
    println!(
        "{:<10} {:<9} {:>10} {:>16} {:>6} {:>8}",
        "collective", "path", "ms/op", "MiB copied/op", "iters", "on path"
    );
    for r in &res.collectives {
        println!(
            "{:<10} {:<9} {:>10.3} {:>16.1} {:>6} {:>8}",
            r.coll.name(),
            r.path(),
            r.time.as_secs_f64() * 1e3,
            r.bytes_copied as f64 / 1048576.0,
            r.iters,
            r.ops_on_path
        );
    }
    println!();
}

/// Writes the CSV files and the plot; returns the paths written. A part's CSV file is written
/// only when the part ran; `results.csv` always; the plot with the transfer rows.
pub(crate) fn write_files(res: &Results, dir: &Path) -> Res<Vec<String>> {
    let mut written = Vec::new();
    let mut put = |name: &str, text: String| -> Res<()> {
        let p = dir.join(name);
        std::fs::write(&p, text)?;
        written.push(p.display().to_string());
        Ok(())
    };
    if !res.transfer.is_empty() {
        put("transfer.csv", transfer_csv(&res.transfer))?;
    }
    if !res.translate.is_empty() {
        put("translate.csv", translate_csv(&res.translate))?;
    }
    if !res.collectives.is_empty() {
        put("collectives.csv", collectives_csv(&res.collectives))?;
    }
    if let Some(h) = &res.hixl {
        put("hixl.csv", hixl_csv(h))?;
    }
    put("results.csv", results_csv(res))?;
    if !res.transfer.is_empty() {
        let p = dir.join("bandwidth.svg");
        plot(res, &p)?;
        written.push(p.display().to_string());
    }
    Ok(written)
}

/// `transfer.csv`: a line per transfer row.
fn transfer_csv(rows: &[Row]) -> String {
    let mut s = String::from(
        "pattern,op,block_bytes,batch,bytes,descriptors,engine_s,engine_gbs,engine_desc_per_s,memcpy_s,memcpy_gbs,memcpy_desc_per_s,engine_vs_memcpy,ucx_gbs,engine_vs_ucx\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{:.6},{:.4},{:.0},{:.6},{:.4},{:.0},{:.4},{},{}",
            r.label(),
            r.op_name(),
            r.block,
            r.batch,
            r.bytes,
            r.descs,
            r.engine.as_secs_f64(),
            r.engine_gbs(),
            r.engine_descs_s(),
            r.memcpy.as_secs_f64(),
            r.memcpy_gbs(),
            r.memcpy_descs_s(),
            r.vs_memcpy(),
            fmt_opt(r.ucx_gbs, 4),
            fmt_opt(r.vs_ucx(), 4)
        );
    }
    s
}

/// `translate.csv`: a line per translate row.
fn translate_csv(rows: &[crate::translate::Row]) -> String {
    let mut s =
        String::from("segments,local,submit_ns_per_desc,total_ns_per_desc,prepared_submit_ns_per_desc,floor_ns_per_desc,descriptors,connect_s\n");
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{:.1},{:.1},{},{:.1},{},{:.4}",
            r.segments,
            if r.host { "host" } else { "hbm" },
            r.submit_ns,
            r.total_ns,
            fmt_opt(r.prepared_ns, 1),
            r.floor_ns,
            r.descs,
            r.connect.as_secs_f64()
        );
    }
    s
}

/// `collectives.csv`: a line per collective and path.
fn collectives_csv(rows: &[crate::collectives::Row]) -> String {
    let mut s =
        String::from("collective,path,ranks,bytes_per_rank,ms_per_op,bytes_copied_per_op,iters\n");
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{},{},{:.4},{},{}",
            r.coll.name(),
            r.path(),
            crate::collectives::RANKS,
            crate::collectives::BYTES,
            r.time.as_secs_f64() * 1e3,
            r.bytes_copied,
            r.iters
        );
    }
    s
}

/// `hixl.csv`: a line per cell of the HIXL-shaped table.
fn hixl_csv(h: &crate::hixl::Report) -> String {
    let mut s = String::from(
        "dir,layout,block_bytes,submit_threads,call_ns,bytes,step_s,gbs,memcpy_s,vs_memcpy,caller_cpu_s\n",
    );
    for c in &h.cells {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{:.6},{:.4},{:.6},{:.4},{:.6}",
            c.dir.name(),
            if c.scatter { "scatter" } else { "contig" },
            c.block,
            c.threads,
            h.call_ns,
            c.bytes,
            c.step.as_secs_f64(),
            c.gbs(),
            c.memcpy.as_secs_f64(),
            c.vs_memcpy(),
            c.cpu.as_secs_f64()
        );
    }
    s
}

/// `results.csv` (`key,value`): what was measured (the backend, the devices, the ceiling),
/// then the RESULT figures.
fn results_csv(res: &Results) -> String {
    let mut s = String::from("key,value\n");
    if let Some(m) = &res.meta {
        let _ = writeln!(s, "backend,{}", csv_field(&m.backend));
        let _ = writeln!(s, "device,{}", m.device);
        let _ = writeln!(s, "peer_device,{}", m.peer_device);
    }
    if let Some(c) = &res.ceiling {
        let _ = writeln!(s, "ceiling,{}", csv_field(&c.to_string()));
    }
    for (k, v) in result_pairs(res) {
        let _ = writeln!(s, "{k},{}", fmt_opt(v, 4));
    }
    s
}

/// `v` as one CSV field: quoted (inner quotes doubled) when it holds a comma, a quote or a
/// line break.
fn csv_field(v: &str) -> String {
    if v.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v.to_owned()
    }
}

/// A plotted line: name, colour, (log2 block size, GB/s) points.
type Series = (String, RGBColor, Vec<(f64, f64)>);

/// Bandwidth against block size: engine and memcpy (walk and repeat, WRITE), UCX put.
fn plot(res: &Results, path: &Path) -> Res<()> {
    let series = plot_series(res);
    let (ymin, ymax) = y_range(&series);
    let on = match &res.meta {
        Some(m) if !m.emulator => format!("CANN, device {} to {}", m.device, m.peer_device),
        _ => "emulator, one host".to_owned(),
    };
    draw(&series, ymin, ymax, &on, path)
}

/// The plotted lines: engine and memcpy for walk WRITE, walk READ and repeat WRITE, then UCX
/// put (repeat) if measured.
fn plot_series(res: &Results) -> Vec<Series> {
    let x = |b: usize| (b as f64).log2();
    // The ceiling's name (`memcpy`; on CANN `aclrtMemcpyAsync`).
    let mem = res.ceiling.as_ref().map_or("memcpy", |c| c.name.as_str());
    let mut series: Vec<Series> = Vec::new();
    for (pattern, op, c_eng, c_mem) in [
        (
            Pattern::Walk,
            TransferOp::Write,
            RGBColor(0, 90, 200),
            RGBColor(120, 120, 120),
        ),
        (
            Pattern::Walk,
            TransferOp::Read,
            RGBColor(0, 160, 220),
            RGBColor(170, 170, 170),
        ),
        (
            Pattern::Repeat,
            TransferOp::Write,
            RGBColor(200, 60, 0),
            RGBColor(60, 60, 60),
        ),
    ] {
        let rows: Vec<&Row> = SIZES
            .iter()
            .filter_map(|&b| find(res, pattern, op, b))
            .collect();
        let tag = format!(
            "{} {}",
            match op {
                TransferOp::Write => "WRITE",
                TransferOp::Read => "READ",
            },
            pattern.name()
        );
        series.push((
            format!("engine {tag}"),
            c_eng,
            rows.iter().map(|r| (x(r.block), r.engine_gbs())).collect(),
        ));
        series.push((
            format!("{mem} {tag}"),
            c_mem,
            rows.iter().map(|r| (x(r.block), r.memcpy_gbs())).collect(),
        ));
    }
    let ucx: Vec<(f64, f64)> = SIZES
        .iter()
        .filter_map(|&b| find(res, Pattern::Repeat, TransferOp::Write, b))
        .filter_map(|r| r.ucx_gbs.map(|g| (x(r.block), g)))
        .collect();
    if !ucx.is_empty() {
        series.push(("UCX put (repeat)".into(), RGBColor(0, 150, 60), ucx));
    }
    series
}

/// The log-scale y range (GB/s) over every point of `series`.
fn y_range(series: &[Series]) -> (f64, f64) {
    // Log scale: the repeat pattern's memcpy runs in cache at hundreds of GB/s, the walk at
    // memory speed; headroom above for the legend.
    let values = || series.iter().flat_map(|s| s.2.iter().map(|p| p.1));
    let ymax = values().fold(0.0f64, f64::max).max(0.1) * 6.0;
    let ymin = values()
        .filter(|v| *v > 0.0)
        .fold(f64::MAX, f64::min)
        .min(ymax / 10.0)
        / 1.5;
    (ymin, ymax)
}

/// Draws `series` (lines with point markers and a legend) into the SVG file at `path`; `on`
/// says what was measured (`emulator, one host`).
fn draw(series: &[Series], ymin: f64, ymax: f64, on: &str, path: &Path) -> Res<()> {
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("ascend-bench transfer: bandwidth vs block size ({on}; log scale)"),
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(11.5f64..26.5f64, (ymin..ymax).log_scale())
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("block size")
        .y_desc("GB/s")
        .x_labels(16)
        .x_label_formatter(&|v| {
            let b = 2f64.powf(*v).round() as usize;
            if (v.fract()).abs() < 1e-9 && SIZES.contains(&b) {
                size_name(b)
            } else {
                String::new()
            }
        })
        .draw()
        .map_err(|e| e.to_string())?;
    for (name, color, pts) in series {
        let c = *color;
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
            .map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}
