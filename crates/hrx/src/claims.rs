//! Which nodes the device claims: a set of eager ops it runs standalone, fused patterns
//! claimed only when the whole pattern is present, and the view ops (always accepted; they
//! move no data). `GGML_OP_NONE` is always accepted so weights may live in HRX buffers.
//!
//! The eager set starts from [`DEFAULT_EAGER`], then `GGML_HRX_EAGER_OPS` is applied once
//! (see [`parse_spec`]), then the C API may change it at any time. It is process-wide.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use ggml_sys::*;

use crate::ops::{op_by_name, op_name, OP_NAMES};

/// Ops claimed by default.
pub const DEFAULT_EAGER: &[ggml_op] = &[
    GGML_OP_ADD,
    GGML_OP_SUB,
    GGML_OP_MUL,
    GGML_OP_DIV,
    GGML_OP_SCALE,
    GGML_OP_GET_ROWS,
    GGML_OP_MUL_MAT,
    GGML_OP_RMS_NORM,
    GGML_OP_NORM,
    GGML_OP_ROPE,
    GGML_OP_SOFT_MAX,
    GGML_OP_GLU,
    GGML_OP_UNARY,
    GGML_OP_CPY,
    GGML_OP_DUP,
    GGML_OP_FILL,
    GGML_OP_SET_ROWS,
    GGML_OP_CONT,
];

/// Weight types a `MUL_MAT` / `GET_ROWS` source 0 may have.
pub const WEIGHT_TYPES: &[ggml_type] = &[
    GGML_TYPE_F32,
    GGML_TYPE_F16,
    GGML_TYPE_BF16,
    GGML_TYPE_Q4_0,
    GGML_TYPE_Q4_1,
    GGML_TYPE_Q8_0,
    GGML_TYPE_Q4_K,
    GGML_TYPE_Q6_K,
];

/// Types every other tensor of a claimed node may have.
const PLAIN_TYPES: &[ggml_type] = &[
    GGML_TYPE_F32,
    GGML_TYPE_F16,
    GGML_TYPE_BF16,
    GGML_TYPE_I32,
    GGML_TYPE_I64,
];

fn table() -> &'static Vec<AtomicBool> {
    static EAGER: OnceLock<Vec<AtomicBool>> = OnceLock::new();
    EAGER.get_or_init(|| {
        let mut set = vec![false; OP_NAMES.len()];
        for &op in DEFAULT_EAGER {
            set[op as usize] = true;
        }
        if let Ok(spec) = std::env::var("GGML_HRX_EAGER_OPS") {
            set = apply_env_spec(&spec, set);
        }
        set.into_iter().map(AtomicBool::new).collect()
    })
}

/// `GGML_HRX_EAGER_OPS` applied to `set` (the default set), what is wrong with it logged:
/// an unknown name ignores it, and so does a value that names no op (empty, or only
/// separators), which would otherwise mean the default set without a word.
fn apply_env_spec(spec: &str, set: Vec<bool>) -> Vec<bool> {
    if spec
        .split([',', ' ', '\t', '\n'])
        .all(|s| s.trim().is_empty())
    {
        crate::log::warn(&format!(
            "HRX: GGML_HRX_EAGER_OPS='{spec}' names no op; using the default set\n"
        ));
        return set;
    }
    match parse_spec(spec, &set) {
        Ok(s) => s,
        Err(e) => {
            crate::log::error(&format!("HRX: GGML_HRX_EAGER_OPS='{spec}' ignored: {e}\n"));
            set
        }
    }
}

/// Whether `op` is in the eager set.
pub fn is_eager(op: ggml_op) -> bool {
    table()
        .get(op as usize)
        .is_some_and(|b| b.load(Ordering::Relaxed))
}

/// Adds or removes `op`; `false` for an op out of range or `GGML_OP_NONE` (always accepted,
/// not removable).
pub fn set_eager(op: ggml_op, on: bool) -> bool {
    if op == GGML_OP_NONE {
        return on;
    }
    match table().get(op as usize) {
        Some(b) => {
            b.store(on, Ordering::Relaxed);
            true
        }
        None => false,
    }
}

/// Applies a spec (see [`parse_spec`]) to the current set.
pub fn apply_spec(spec: &str) -> Result<(), String> {
    let cur: Vec<bool> = table().iter().map(|b| b.load(Ordering::Relaxed)).collect();
    let new = parse_spec(spec, &cur)?;
    for (b, v) in table().iter().zip(new) {
        b.store(v, Ordering::Relaxed);
    }
    Ok(())
}

/// The current eager ops, by name.
pub fn eager_names() -> Vec<&'static str> {
    (0..OP_NAMES.len())
        .filter(|&i| is_eager(i as ggml_op))
        .map(|i| OP_NAMES[i])
        .collect()
}

/// Parses an eager-op spec against `current` (indexed by op) and returns the new set.
///
/// The spec is a list of op names separated by commas or spaces. `+NAME` adds, `-NAME`
/// removes. When the list has at least one entry without a sign, it is a full list: the set
/// starts empty and the unsigned entries are added, then the signed edits apply. `DEFAULT`
/// stands for the default set, `ALL` for every op. Names are case-insensitive; an unknown
/// name is an error naming it.
pub fn parse_spec(spec: &str, current: &[bool]) -> Result<Vec<bool>, String> {
    let items: Vec<&str> = spec
        .split([',', ' ', '\t', '\n'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let full = items.iter().any(|s| !s.starts_with(['+', '-']));
    let mut set = if full {
        vec![false; current.len()]
    } else {
        current.to_vec()
    };
    let mut edits = Vec::new();
    for item in &items {
        let (sign, name) = match item.as_bytes()[0] {
            b'+' => (Some(true), &item[1..]),
            b'-' => (Some(false), &item[1..]),
            _ => (None, *item),
        };
        let ops: Vec<ggml_op> = if name.eq_ignore_ascii_case("DEFAULT") {
            DEFAULT_EAGER.to_vec()
        } else if name.eq_ignore_ascii_case("ALL") {
            (1..current.len() as ggml_op).collect()
        } else {
            vec![op_by_name(name).ok_or_else(|| format!("unknown op '{name}'"))?]
        };
        match sign {
            None => ops.iter().for_each(|&o| set[o as usize] = true),
            Some(v) => edits.extend(ops.into_iter().map(|o| (o, v))),
        }
    }
    for (o, v) in edits {
        set[o as usize] = v;
    }
    set[GGML_OP_NONE as usize] = false;
    Ok(set)
}

/// Why a node is (or is not) claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// `GGML_OP_NONE` or a view op: nothing to run.
    Passive,
    /// An eager op the device runs standalone.
    Eager,
    /// The last node of a fused pattern whose producers are present.
    Fused(&'static str),
    /// Not claimed, with the reason.
    No(String),
}

impl Claim {
    /// Whether the device accepts the node.
    pub fn accepted(&self) -> bool {
        !matches!(self, Claim::No(_))
    }
}

/// Whether `op` only re-describes existing storage (`NONE` included: HRX accepts leaves).
///
/// ggml-base's `tensor::meta::is_view_op` asks the same of the view ops; HRX keeps its own
/// because it must load under stock's libggml-base too, so it links nothing of ours.
pub fn is_view_op(op: ggml_op) -> bool {
    matches!(
        op,
        GGML_OP_NONE | GGML_OP_VIEW | GGML_OP_RESHAPE | GGML_OP_PERMUTE | GGML_OP_TRANSPOSE
    )
}

/// Follows view ops (`VIEW`, `RESHAPE`, `PERMUTE`, `TRANSPOSE`) back to the node that
/// produced the data.
pub fn through_views(mut t: &ggml_tensor) -> &ggml_tensor {
    let mut guard = 0;
    while matches!(
        t.op,
        GGML_OP_VIEW | GGML_OP_RESHAPE | GGML_OP_PERMUTE | GGML_OP_TRANSPOSE
    ) && guard < 64
    {
        // SAFETY: src[0] of a view op is NULL or a live tensor of the same graph.
        match unsafe { t.src[0].as_ref() } {
            Some(s) => t = s,
            None => break,
        }
        guard += 1;
    }
    t
}

fn srcs(t: &ggml_tensor) -> impl Iterator<Item = &ggml_tensor> {
    // SAFETY: non-NULL sources of a live tensor are live tensors.
    t.src.iter().filter_map(|s| unsafe { s.as_ref() })
}

fn types_ok(node: &ggml_tensor) -> Result<(), String> {
    let weight_src0 = matches!(node.op, GGML_OP_MUL_MAT | GGML_OP_GET_ROWS);
    let quant_any = matches!(
        node.op,
        GGML_OP_CPY | GGML_OP_DUP | GGML_OP_SET_ROWS | GGML_OP_CONT
    );
    let check = |t: &ggml_tensor, weight: bool| {
        let ok = PLAIN_TYPES.contains(&t.type_)
            || ((weight || quant_any) && WEIGHT_TYPES.contains(&t.type_));
        if ok {
            Ok(())
        } else {
            Err(format!(
                "type {} not claimed for {}",
                t.type_,
                op_name(node.op)
            ))
        }
    };
    check(node, false)?;
    for (i, s) in srcs(node).enumerate() {
        check(s, weight_src0 && i == 0)?;
    }
    Ok(())
}

/// The fused pattern ending at `node`, if its producers are present: `RMS_NORM+MUL` is a
/// `MUL` (all F32) one of whose sources is, looking through views, an `RMS_NORM`.
pub fn fused_pattern(node: &ggml_tensor) -> Option<&'static str> {
    if node.op == GGML_OP_MUL && node.type_ == GGML_TYPE_F32 {
        let has_norm = srcs(node).any(|s| through_views(s).op == GGML_OP_RMS_NORM);
        let all_f32 = srcs(node).all(|s| s.type_ == GGML_TYPE_F32);
        if has_norm && all_f32 {
            return Some("RMS_NORM+MUL");
        }
    }
    None
}

/// Decides whether the device claims `node`. `kernels_support` says whether the device's
/// kernels handle the node (for the simulator: ggml's CPU kernels do).
pub fn claim(node: &ggml_tensor, kernels_support: &dyn Fn(&ggml_tensor) -> bool) -> Claim {
    if is_view_op(node.op) {
        return Claim::Passive;
    }
    let how = if is_eager(node.op) {
        Claim::Eager
    } else if let Some(p) = fused_pattern(node) {
        Claim::Fused(p)
    } else {
        return Claim::No(format!("{} is not an eager op", op_name(node.op)));
    };
    if let Err(e) = types_ok(node) {
        return Claim::No(e);
    }
    if !kernels_support(node) {
        return Claim::No("the device kernels do not support this case".into());
    }
    how
}

/// The batch size a GPU backend uses to decide `offload_op`: the number of columns the op
/// processes (`ne[1]`, `ne[2]` for `MUL_MAT_ID`).
pub fn batch_size(node: &ggml_tensor) -> i64 {
    match node.op {
        GGML_OP_MUL_MAT_ID => node.ne[2],
        _ => node.ne[1],
    }
}

/// `offload_op`: worth moving to the device although its weight lives in host memory:
/// claimed, not `GET_ROWS`, and a batch of at least 32 (the rule GPU backends use).
pub fn offload(node: &ggml_tensor, kernels_support: &dyn Fn(&ggml_tensor) -> bool) -> bool {
    node.op != GGML_OP_GET_ROWS
        && batch_size(node) >= 32
        && matches!(claim(node, kernels_support), Claim::Eager | Claim::Fused(_))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_eager_spec_naming_no_op_is_warned_about() {
        let default: Vec<bool> = (0..OP_NAMES.len())
            .map(|i| DEFAULT_EAGER.contains(&(i as ggml_op)))
            .collect();
        for spec in ["", ",", " , \t"] {
            let (set, log) = crate::testing::capture_log(|| apply_env_spec(spec, default.clone()));
            assert_eq!(set, default);
            assert_eq!(
                log,
                [format!(
                    "HRX: GGML_HRX_EAGER_OPS='{spec}' names no op; using the default set\n"
                )]
            );
        }
        let (set, log) = crate::testing::capture_log(|| apply_env_spec("+CONCAT", default.clone()));
        assert!(log.is_empty() && set[GGML_OP_CONCAT as usize]);
        let (set, log) = crate::testing::capture_log(|| apply_env_spec("NOPE", default.clone()));
        assert_eq!(set, default);
        assert_eq!(
            log,
            ["HRX: GGML_HRX_EAGER_OPS='NOPE' ignored: unknown op 'NOPE'\n"]
        );
    }

    fn t(op: ggml_op, ty: ggml_type) -> ggml_tensor {
        ggml_tensor {
            op,
            type_: ty,
            ne: [4, 4, 1, 1],
            ..Default::default()
        }
    }

    #[test]
    fn spec_edits_and_full_lists() {
        let mut cur = vec![false; OP_NAMES.len()];
        cur[GGML_OP_ADD as usize] = true;
        cur[GGML_OP_SET_ROWS as usize] = true;
        let s = parse_spec("+FILL,-SET_ROWS", &cur).unwrap();
        assert!(
            s[GGML_OP_ADD as usize] && s[GGML_OP_FILL as usize] && !s[GGML_OP_SET_ROWS as usize]
        );
        let s = parse_spec("mul, scale", &cur).unwrap();
        assert_eq!(s.iter().filter(|&&b| b).count(), 2);
        assert!(s[GGML_OP_MUL as usize] && s[GGML_OP_SCALE as usize]);
        let s = parse_spec("DEFAULT,-MUL_MAT", &cur).unwrap();
        assert_eq!(s.iter().filter(|&&b| b).count(), DEFAULT_EAGER.len() - 1);
        assert!(!s[GGML_OP_MUL_MAT as usize]);
        let e = parse_spec("+FILL,+NOPE", &cur).unwrap_err();
        assert!(e.contains("NOPE"), "{e}");
        assert_eq!(parse_spec("", &cur).unwrap(), cur);
        assert!(!parse_spec("ALL", &cur).unwrap()[GGML_OP_NONE as usize]);
    }

    #[test]
    fn views_and_none_are_always_accepted() {
        let yes = |_: &ggml_tensor| true;
        for op in [
            GGML_OP_NONE,
            GGML_OP_VIEW,
            GGML_OP_RESHAPE,
            GGML_OP_PERMUTE,
            GGML_OP_TRANSPOSE,
        ] {
            assert_eq!(claim(&t(op, GGML_TYPE_F32), &yes), Claim::Passive);
        }
    }

    #[test]
    fn fused_pattern_needs_its_producer_through_views() {
        let mut norm = t(GGML_OP_RMS_NORM, GGML_TYPE_F32);
        let mut view = t(GGML_OP_RESHAPE, GGML_TYPE_F32);
        view.src[0] = &mut norm;
        let mut w = t(GGML_OP_NONE, GGML_TYPE_F32);
        let mut add = t(GGML_OP_ADD, GGML_TYPE_F32);
        let mut mul = t(GGML_OP_MUL, GGML_TYPE_F32);
        mul.src[0] = &mut view;
        mul.src[1] = &mut w;
        assert_eq!(fused_pattern(&mul), Some("RMS_NORM+MUL"));
        let mut plain = t(GGML_OP_MUL, GGML_TYPE_F32);
        plain.src[0] = &mut add;
        plain.src[1] = &mut w;
        assert_eq!(fused_pattern(&plain), None);
        let mut f16 = mul;
        f16.type_ = GGML_TYPE_F16;
        assert_eq!(fused_pattern(&f16), None);
        // with MUL withdrawn from the eager set, only the pattern claims it (no other test
        // uses MUL, so flipping the process-wide set here is race-free)
        let yes = |_: &ggml_tensor| true;
        assert!(set_eager(GGML_OP_MUL, false));
        assert_eq!(claim(&mul, &yes), Claim::Fused("RMS_NORM+MUL"));
        assert!(!claim(&plain, &yes).accepted());
        assert!(set_eager(GGML_OP_MUL, true));
        assert_eq!(claim(&mul, &yes), Claim::Eager);
    }

    #[test]
    fn mul_mat_weight_types() {
        let yes = |_: &ggml_tensor| true;
        let mut x = t(GGML_OP_NONE, GGML_TYPE_F32);
        for (ty, ok) in [
            (GGML_TYPE_Q4_0, true),
            (GGML_TYPE_Q4_1, true),
            (GGML_TYPE_Q8_0, true),
            (GGML_TYPE_F16, true),
            (GGML_TYPE_Q4_K, true),
            (GGML_TYPE_Q6_K, true),
            (GGML_TYPE_Q5_K, false),
        ] {
            let mut w = t(GGML_OP_NONE, ty);
            let mut mm = t(GGML_OP_MUL_MAT, GGML_TYPE_F32);
            mm.src[0] = &mut w;
            mm.src[1] = &mut x;
            assert_eq!(claim(&mm, &yes).accepted(), ok, "type {ty}");
        }
        // a quantized source is not claimed for an elementwise op
        let mut w = t(GGML_OP_NONE, GGML_TYPE_Q4_0);
        let mut add = t(GGML_OP_ADD, GGML_TYPE_F32);
        add.src[0] = &mut w;
        assert!(!claim(&add, &yes).accepted());
        // the kernels' verdict is respected
        let no = |_: &ggml_tensor| false;
        assert!(!claim(&t(GGML_OP_ADD, GGML_TYPE_F32), &no).accepted());
    }

    #[test]
    fn offload_follows_batch_size() {
        let yes = |_: &ggml_tensor| true;
        let mut w = t(GGML_OP_NONE, GGML_TYPE_Q4_0);
        let mut x = t(GGML_OP_NONE, GGML_TYPE_F32);
        let mut mm = t(GGML_OP_MUL_MAT, GGML_TYPE_F32);
        mm.src[0] = &mut w;
        mm.src[1] = &mut x;
        mm.ne[1] = 31;
        assert!(!offload(&mm, &yes));
        mm.ne[1] = 32;
        assert!(offload(&mm, &yes));
    }
}
