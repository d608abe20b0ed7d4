//! The modularity experiment's pre-training runs and sweeps. An integration test rather than unit
//! tests: it links the library's one compiled copy of the training loop, where a unit test would
//! compile burn's model and autodiff code into the test build again (~150 s on 2 cores).

use std::io::Write;

use corrflow_synth::modularity::generate;
use corrflow_synth::pretrain::{run, Strategy};
use corrflow_synth::sweep::{markdown_table, sweep, SweepReport};
use corrflow_synth::{Background, ModularityParams};

#[test]
fn a_short_run_is_deterministic_and_its_loss_falls() {
    let p = ModularityParams { samples: 300, train_samples: 200, test_samples: 100, epochs: 2, ..Default::default() };
    let d = generate(&p, Background::Mean, 1.0, 0);
    let a = run(&p, &d, Strategy::Correlation, 4).unwrap();
    let b = run(&p, &d, Strategy::Correlation, 4).unwrap();
    assert_eq!((a.accuracy, a.first_loss, a.last_loss), (b.accuracy, b.first_loss, b.last_loss));
    assert!(a.last_loss < a.first_loss, "{a:?}");
    assert!((0.0..=1.0).contains(&a.accuracy) && (0.0..=1.0).contains(&a.train_accuracy));
    // Another seed, other weights and masks.
    let c = run(&p, &d, Strategy::Correlation, 5).unwrap();
    assert_ne!(a.first_loss, c.first_loss);
}

#[test]
fn a_tiny_sweep_has_one_row_per_background_and_gamma_and_paired_runs() {
    let p = ModularityParams {
        samples: 150,
        train_samples: 100,
        test_samples: 50,
        epochs: 1,
        seeds: 2,
        gammas: vec![0.0, 1.0],
        backgrounds: vec![Background::Mean],
        threads: 2,
        ..Default::default()
    };
    let r = sweep(&p, None, &|_, _, _| {}).unwrap();
    assert_eq!(r.rows.len(), 2);
    assert_eq!(r.runs.len(), 2 * 2 * 2);
    for row in &r.rows {
        assert!((0.0..=1.0).contains(&row.random.mean) && (0.0..=1.0).contains(&row.correlation.mean));
        assert!((row.gain.mean - (row.correlation.mean - row.random.mean)).abs() < 1e-12);
    }
    // Deterministic whatever the thread count.
    let q = ModularityParams { threads: 1, ..p };
    let again = sweep(&q, None, &|_, _, _| {}).unwrap();
    let accs = |r: &SweepReport| r.runs.iter().map(|x| x.outcome.accuracy).collect::<Vec<_>>();
    assert_eq!(accs(&r), accs(&again));
    assert_eq!(r.resumed, 0);
    assert!(markdown_table(&r).lines().count() == 4);
}

#[test]
fn an_interrupted_sweep_resumes_from_its_journal() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("runs.jsonl");
    let p = ModularityParams {
        samples: 120,
        train_samples: 80,
        test_samples: 40,
        epochs: 1,
        seeds: 1,
        gammas: vec![1.0],
        backgrounds: vec![Background::Mean],
        threads: 1,
        ..Default::default()
    };
    let first = sweep(&p, Some(&journal), &|_, _, _| {}).unwrap();
    // An interruption mid-line, then a wider sweep: the finished runs are reused, the cut
    // line is skipped, and only the new γ is trained.
    std::fs::OpenOptions::new().append(true).open(&journal).unwrap().write_all(b"{\"settings\":\"ab").unwrap();
    let trained = std::sync::atomic::AtomicUsize::new(0);
    let wider = ModularityParams { gammas: vec![0.0, 1.0], ..p.clone() };
    let both = sweep(&wider, Some(&journal), &|_, _, _| {
        trained.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    })
    .unwrap();
    assert_eq!((both.resumed, trained.into_inner(), both.runs.len()), (2, 2, 4));
    let at_one: Vec<f64> = both.runs.iter().filter(|r| r.gamma == 1.0).map(|r| r.outcome.accuracy).collect();
    assert_eq!(at_one, first.runs.iter().map(|r| r.outcome.accuracy).collect::<Vec<_>>());
    // A journal line counts only for the settings it was trained with.
    let other = ModularityParams { lr: 2e-3, ..p };
    assert_eq!(sweep(&other, Some(&journal), &|_, _, _| {}).unwrap().resumed, 0);
    let lines = std::fs::read_to_string(&journal).unwrap();
    assert_eq!(lines.lines().filter(|l| l.ends_with('}')).count(), 6);
}
