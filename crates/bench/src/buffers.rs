//! Compute buffers, arm B over arm A: per model (a real graph on one device configuration,
//! or one benchmark graph configuration) the bytes of its compute buffers summed over its
//! backends, the ratio B/A per model, and the total over a set of models. The goals: no model
//! gets larger buffers than stock's ([`GOAL_MODEL`]), and the total shrinks by a tenth
//! ([`GOAL_TOTAL`]).

use crate::stats::Summary;

/// Goal: every model's compute buffers in B at most this multiple of A's.
pub const GOAL_MODEL: f64 = 1.0;
/// Goal: the sum of B's compute buffers over a set of models at most this multiple of A's.
pub const GOAL_TOTAL: f64 = 0.9;

/// One model's compute buffers in both arms.
#[derive(Debug, Clone, PartialEq)]
pub struct Sized {
    /// What the model is, as the report names it (`qwen3moe`, `smollm2, 2 backends`).
    pub name: String,
    /// `[A, B]`: bytes summed over the model's backends (`ggml_backend_sched_get_buffer_size`).
    pub bytes: [i64; 2],
}

impl Sized {
    /// B/A. A model without buffers in A gets 1 when B has none either, infinity when B has
    /// some (so it counts as over the goal).
    pub fn ratio(&self) -> f64 {
        let [a, b] = self.bytes;
        if a > 0 {
            b as f64 / a as f64
        } else if b == 0 {
            1.0
        } else {
            f64::INFINITY
        }
    }
}

/// The ratios of a non-empty set of models.
#[derive(Debug, Clone, PartialEq)]
pub struct Ratios {
    /// Per-model B/A: n, min, median, max.
    pub per_model: Summary,
    /// The models above [`GOAL_MODEL`], with their ratio, largest first.
    pub over: Vec<(String, f64)>,
    /// `[A, B]`: bytes summed over all models and backends.
    pub total: [i64; 2],
}

impl Ratios {
    /// `None` for an empty set.
    pub fn of(models: &[Sized]) -> Option<Ratios> {
        let ratios: Vec<f64> = models.iter().map(Sized::ratio).collect();
        let per_model = Summary::of(&ratios)?;
        let mut over: Vec<(String, f64)> = models
            .iter()
            .zip(&ratios)
            .filter(|(_, &r)| r > GOAL_MODEL)
            .map(|(m, &r)| (m.name.clone(), r))
            .collect();
        over.sort_by(|x, y| y.1.total_cmp(&x.1).then_with(|| x.0.cmp(&y.0)));
        let sum = |k: usize| models.iter().map(|m| m.bytes[k]).sum::<i64>();
        Some(Ratios {
            per_model,
            over,
            total: [sum(0), sum(1)],
        })
    }

    /// Σ B / Σ A, with [`Sized::ratio`]'s rule for an empty A.
    pub fn total_ratio(&self) -> f64 {
        Sized {
            name: String::new(),
            bytes: self.total,
        }
        .ratio()
    }

    /// Whether every model is at most [`GOAL_MODEL`].
    pub fn every_model_met(&self) -> bool {
        self.over.is_empty()
    }

    /// Whether the total is at most [`GOAL_TOTAL`].
    pub fn total_met(&self) -> bool {
        self.total_ratio() <= GOAL_TOTAL
    }

    /// The models over the goal as `name ratio, …` (three decimals), "none" when there are
    /// none.
    pub fn over_cell(&self) -> String {
        if self.over.is_empty() {
            return "none".into();
        }
        let names: Vec<String> = self
            .over
            .iter()
            .map(|(n, r)| format!("{n} {r:.3}"))
            .collect();
        format!("{}: {}", self.over.len(), names.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(name: &str, a: i64, b: i64) -> Sized {
        Sized {
            name: name.into(),
            bytes: [a, b],
        }
    }

    #[test]
    fn summarises_per_model_and_total_and_names_the_models_over_one() {
        let models = [
            m("a", 1000, 500),
            m("b", 1000, 1000),
            m("c", 2000, 2200),
            m("d", 4000, 4100),
            m("e", 0, 0),
        ];
        let r = Ratios::of(&models).unwrap();
        assert_eq!(r.per_model.n, 5);
        assert_eq!(r.per_model.min, 0.5);
        assert_eq!(r.per_model.median, 1.0);
        assert!((r.per_model.max - 1.1).abs() < 1e-12);
        // largest ratio first: c 1.1, d 1.025; b at exactly 1.00 is not over
        assert_eq!(r.over.len(), 2);
        assert_eq!(r.over[0].0, "c");
        assert_eq!(r.over[1].0, "d");
        assert_eq!(r.over_cell(), "2: c 1.100, d 1.025");
        assert!(!r.every_model_met());
        // 7800 / 8000
        assert_eq!(r.total, [8000, 7800]);
        assert!((r.total_ratio() - 0.975).abs() < 1e-12);
        assert!(!r.total_met());
    }

    #[test]
    fn goals_met_at_their_bounds() {
        let r = Ratios::of(&[m("a", 1000, 1000), m("b", 1000, 800)]).unwrap();
        assert!(r.every_model_met());
        assert_eq!(r.over_cell(), "none");
        assert!((r.total_ratio() - 0.9).abs() < 1e-12);
        assert!(r.total_met());
    }

    #[test]
    fn a_model_new_in_b_is_over_and_an_empty_set_has_no_summary() {
        assert_eq!(m("x", 0, 64).ratio(), f64::INFINITY);
        assert_eq!(m("x", 0, 0).ratio(), 1.0);
        let r = Ratios::of(&[m("x", 0, 64)]).unwrap();
        assert_eq!(r.over_cell(), "1: x inf");
        assert!(!r.total_met());
        assert!(Ratios::of(&[]).is_none());
    }
}
