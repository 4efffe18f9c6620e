//! The binding test vectors (tests/vectors/README.md, $DSV4_VECTORS_DIR) through the safe crate,
//! compared with the float64 reference by the spec 2.4 rule; bad input as `Err` with libdsv4's
//! message; one plan on several threads; the KV writer, export and queries.
use dsv4::{sys, Bf16, Context, DType, Error, ExportArgs, PlanOptions, RunArgs, Tensor, Workspace};
use std::path::PathBuf;

struct Input {
    name: String,
    dtype: DType,
    shape: Vec<i64>,
    bytes: Vec<u8>,
}

struct Output {
    name: String,
    dtype: DType,
    shape: Vec<i64>,
    want: Vec<f64>,
    tol: [f64; 3], // abs, rel, cos (< 0: not checked)
}

struct Case {
    name: String,
    op: String, // "run" (a plan and dsv4_run) or "merge" (dsv4_merge)
    options: Vec<(String, i64)>,
    inputs: Vec<Input>,
    outputs: Vec<Output>,
}

fn dtype(name: &str) -> DType {
    match name {
        "bfloat16" => DType::BF16,
        "float16" => DType::F16,
        "float32" => DType::F32,
        "float64" => DType::F64,
        "int32" => DType::I32,
        "uint8" => DType::U8,
        _ => panic!("unknown dtype {}", name),
    }
}

fn load() -> (u64, Vec<Case>) {
    let dir = PathBuf::from(std::env::var("DSV4_VECTORS_DIR").expect("DSV4_VECTORS_DIR"));
    let manifest = std::fs::read_to_string(dir.join("manifest.txt")).expect("manifest.txt");
    let read =
        |file: &str| std::fs::read(dir.join(file)).unwrap_or_else(|e| panic!("{}: {}", file, e));
    let dims = |w: &[&str]| -> Vec<i64> {
        let n: usize = w[0].parse().unwrap();
        w[1..=n].iter().map(|d| d.parse().unwrap()).collect()
    };
    let (mut seed, mut cases) = (0u64, Vec::new());
    for line in manifest.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.first().copied() {
            Some("dsv4-vectors") => assert_eq!(w[1], "1", "vectors format version"),
            Some("seed") => seed = w[1].parse().unwrap(),
            Some("case") => cases.push(Case {
                name: w[1].into(),
                op: "run".into(),
                options: vec![],
                inputs: vec![],
                outputs: vec![],
            }),
            Some("op") => cases.last_mut().unwrap().op = w[1].into(),
            Some("option") => {
                cases.last_mut().unwrap().options.push((w[1].into(), w[2].parse().unwrap()))
            }
            Some("input") => {
                let shape = dims(&w[4..]);
                cases.last_mut().unwrap().inputs.push(Input {
                    name: w[1].into(),
                    dtype: dtype(w[2]),
                    shape,
                    bytes: read(w[3]),
                });
            }
            Some("output") => {
                let shape = dims(&w[3..]);
                let want = read(w[w.len() - 1])
                    .chunks_exact(8)
                    .map(|b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
                    .collect();
                cases.last_mut().unwrap().outputs.push(Output {
                    name: w[1].into(),
                    dtype: dtype(w[2]),
                    shape,
                    want,
                    tol: [0.0; 3],
                });
            }
            Some("tolerance") => {
                let out = cases.last_mut().unwrap().outputs.last_mut().unwrap();
                assert_eq!(out.name, w[1]);
                for i in 0..3 {
                    out.tol[i] = w[2 + i].parse().unwrap();
                }
            }
            Some("end") | None => {}
            Some(other) => panic!("unknown manifest record {}", other),
        }
    }
    assert!(!cases.is_empty());
    (seed, cases)
}

fn plan_options(case: &Case) -> PlanOptions {
    let mut o = PlanOptions::new().unwrap();
    for (key, v) in &case.options {
        let v = *v;
        match key.as_str() {
            "mode" => o.mode = v as u32,
            "flags" => o.flags = v as u32,
            "index_format" => o.index_format = v as u32,
            "num_heads" => o.num_heads = v as i32,
            "max_tokens" => o.max_tokens = v as i32,
            "topk" => o.topk = v as i32,
            "extra_topk" => o.extra_topk = v as i32,
            "compress_ratio" => o.compress_ratio = v as i32,
            "window" => o.window = v as i32,
            "index_topk" => o.index_topk = v as i32,
            "decode_threshold" => o.decode_threshold = v as i32,
            "max_model_len" => o.max_model_len = v,
            "max_requests" => o.max_requests = v as i32,
            "max_swa_blocks_per_request" => o.max_swa_blocks_per_request = v as i32,
            "max_cmp_blocks_per_request" => o.max_cmp_blocks_per_request = v as i32,
            "compressed_block_tokens" => o.compressed_block_tokens = v as i32,
            "swa_cache.layout" => o.swa_cache.layout = v as u32,
            "swa_cache.block_size" => o.swa_cache.block_size = v as i32,
            "swa_cache.block_stride_bytes" => o.swa_cache.block_stride_bytes = v,
            "extra_cache.layout" => o.extra_cache.layout = v as u32,
            "extra_cache.block_size" => o.extra_cache.block_size = v as i32,
            "extra_cache.block_stride_bytes" => o.extra_cache.block_stride_bytes = v,
            "swa_cache.flags" => o.swa_cache.flags = v as u32,
            "extra_cache.flags" => o.extra_cache.flags = v as u32,
            _ => panic!("unknown option {}", key),
        }
    }
    o
}

fn element(dtype: DType, bytes: &[u8], i: usize) -> f64 {
    match (dtype.code, dtype.bits) {
        (sys::DSV4_DTYPE_CODE_BFLOAT, 16) => {
            f32::from_bits(u32::from(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]])) << 16)
                as f64
        }
        (sys::DSV4_DTYPE_CODE_FLOAT, 32) => {
            f32::from_le_bytes([bytes[4 * i], bytes[4 * i + 1], bytes[4 * i + 2], bytes[4 * i + 3]])
                as f64
        }
        _ => panic!("no reader for {:?}", dtype),
    }
}

/// The spec 2.4 rule: infinities/NaNs coincide; abs OR rel per element; cosine difference.
fn compare(case: &str, out: &Output, got: &[u8], seed: u64) -> Result<(), String> {
    let (mut failures, mut first) = (0usize, None);
    let (mut dot, mut ng, mut nw) = (0.0f64, 0.0f64, 0.0f64);
    for (i, &w) in out.want.iter().enumerate() {
        let g = element(out.dtype, got, i);
        let ok = if !g.is_finite() || !w.is_finite() {
            (g.is_nan() && w.is_nan()) || (g.is_infinite() && w.is_infinite() && g == w)
        } else {
            let err = (g - w).abs();
            let rel = if w != 0.0 {
                err / w.abs()
            } else if err > 0.0 {
                f64::INFINITY
            } else {
                0.0
            };
            dot += g * w;
            ng += g * g;
            nw += w * w;
            err < out.tol[0] || rel < out.tol[1]
        };
        if !ok {
            failures += 1;
            first.get_or_insert((i, g, w));
        }
    }
    let cos_diff = if ng + nw > 0.0 { 1.0 - 2.0 * dot / (ng + nw) } else { 0.0 };
    if failures == 0 && (out.tol[2] < 0.0 || cos_diff <= out.tol[2]) {
        return Ok(());
    }
    Err(format!(
        "{}.{}: {} of {} elements out of tolerance (first {:?}), cos_diff {:e} (vectors seed {})",
        case,
        out.name,
        failures,
        out.want.len(),
        first,
        cos_diff,
        seed
    ))
}

fn input_tensors(case: &Case) -> Vec<Tensor<'_>> {
    case.inputs.iter().map(|i| Tensor::from_bytes(&i.bytes, i.dtype, &i.shape).unwrap()).collect()
}

/// NaN-filled output buffers: every element must be written.
fn output_buffers(case: &Case) -> Vec<Vec<u8>> {
    case.outputs.iter().map(|o| vec![0xff; o.want.len() * o.dtype.bits as usize / 8]).collect()
}

fn output_tensors<'a>(case: &Case, buffers: &'a mut [Vec<u8>]) -> Vec<Tensor<'a>> {
    buffers
        .iter_mut()
        .zip(&case.outputs)
        .map(|(b, o)| Tensor::from_bytes_mut(b, o.dtype, &o.shape).unwrap())
        .collect()
}

/// Runs a case with its tensors; `edit` may change the arguments first.
fn run_case<'a>(
    ctx: &Context,
    case: &'a Case,
    inputs: &'a [Tensor<'a>],
    outputs: &'a [Tensor<'a>],
    edit: impl FnOnce(&mut RunArgs<'a>),
) -> dsv4::Result<()> {
    if case.op == "merge" {
        return merge_case(ctx, case, inputs, outputs);
    }
    let plan = ctx.plan(&plan_options(case))?;
    let mut args = RunArgs::default();
    for (t, i) in inputs.iter().zip(&case.inputs) {
        args.set(&i.name, t)?;
    }
    for (t, o) in outputs.iter().zip(&case.outputs) {
        args.set(&o.name, t)?;
    }
    edit(&mut args);
    plan.run(&mut args)
}

/// A merge case: its partial results through `Context::merge`.
fn merge_case<'a>(
    ctx: &Context,
    case: &'a Case,
    inputs: &'a [Tensor<'a>],
    outputs: &'a [Tensor<'a>],
) -> dsv4::Result<()> {
    let mut args = dsv4::MergeArgs::default();
    for (t, i) in inputs.iter().zip(&case.inputs) {
        match i.name.as_str() {
            "out_parts" => args.out_parts = Some(t),
            "lse_parts" => args.lse_parts = Some(t),
            "attn_sink" => args.attn_sink = Some(t),
            other => panic!("merge input {}", other),
        }
    }
    for (t, o) in outputs.iter().zip(&case.outputs) {
        match o.name.as_str() {
            "out" => args.out = Some(t),
            "lse" => args.lse = Some(t),
            other => panic!("merge output {}", other),
        }
    }
    ctx.merge(&args)
}

#[test]
fn vectors_match_the_reference() {
    let (seed, cases) = load();
    let ctx = Context::cpu().unwrap();
    println!("backend {}", ctx.info().unwrap().backend);
    for case in &cases {
        let inputs = input_tensors(case);
        let mut got = output_buffers(case);
        let outputs = output_tensors(case, &mut got);
        run_case(&ctx, case, &inputs, &outputs, |_| {})
            .unwrap_or_else(|e| panic!("{}: {}", case.name, e));
        drop(outputs);
        for (out, bytes) in case.outputs.iter().zip(&got) {
            compare(&case.name, out, bytes, seed).unwrap();
        }
    }
}

// Raw pointers (as for device memory) for the output and the workspace give the same bits.
#[test]
fn raw_pointers_run_like_slices() {
    let (seed, cases) = load();
    let case = cases.iter().find(|c| c.name == "explicit_fp8_extra").unwrap();
    let ctx = Context::cpu().unwrap();
    let plan = ctx.plan(&plan_options(case)).unwrap();
    let inputs = input_tensors(case);
    let out = &case.outputs[0];
    let mut raw_out = vec![0xffu8; out.want.len() * 2];
    let mut workspace = vec![0u8; plan.workspace_size().unwrap()];
    // SAFETY: both buffers outlive the run and hold what the shapes say.
    let out_t = unsafe {
        Tensor::from_raw(
            raw_out.as_mut_ptr().cast(),
            dsv4::Device::CPU,
            DType::BF16,
            &out.shape,
            None,
        )
    }
    .unwrap();
    let mut args = RunArgs {
        out: Some(&out_t),
        workspace: Workspace::Raw { data: workspace.as_mut_ptr().cast(), bytes: workspace.len() },
        ..RunArgs::default()
    };
    for (t, i) in inputs.iter().zip(&case.inputs) {
        args.set(&i.name, t).unwrap();
    }
    plan.run(&mut args).unwrap();
    compare(&case.name, out, &raw_out, seed).unwrap();
}

#[test]
fn one_plan_runs_on_several_threads() {
    let (seed, cases) = load();
    let case = cases.iter().find(|c| c.name == "paged_c4a_fp8_mtp").unwrap();
    let ctx = Context::cpu().unwrap();
    let plan = ctx.plan(&plan_options(case)).unwrap();
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                let inputs: Vec<Tensor<'_>> = case
                    .inputs
                    .iter()
                    .map(|i| Tensor::from_bytes(&i.bytes, i.dtype, &i.shape).unwrap())
                    .collect();
                let mut out = vec![0xffu8; case.outputs[0].want.len() * 2];
                let out_t =
                    Tensor::from_bytes_mut(&mut out, DType::BF16, &case.outputs[0].shape).unwrap();
                let mut workspace = vec![0u8; plan.workspace_size().unwrap()];
                let mut args = RunArgs {
                    out: Some(&out_t),
                    workspace: Workspace::Host(&mut workspace),
                    ..RunArgs::default()
                };
                for (t, i) in inputs.iter().zip(&case.inputs) {
                    args.set(&i.name, t).unwrap();
                }
                plan.run(&mut args).unwrap();
                drop(out_t);
                compare(&case.name, &case.outputs[0], &out, seed).unwrap();
            });
        }
    });
}

fn expect_err(result: dsv4::Result<()>) -> Error {
    match result {
        Err(e) => e,
        Ok(_) => panic!("the call succeeded"),
    }
}

#[test]
fn bad_input_is_an_error_with_libdsv4s_message() {
    let (_, cases) = load();
    let case = cases.iter().find(|c| c.name == "explicit_bf16_sink").unwrap();
    let ctx = Context::cpu().unwrap();
    let q = &case.inputs.iter().find(|i| i.name == "q").unwrap();
    let inputs = input_tensors(case);
    let mut buffers = output_buffers(case);
    let outputs = output_tensors(case, &mut buffers);

    // Wrong dtype: q as float32.
    let q_f32 = Tensor::from_bytes(&q.bytes, DType::F32, &[q.shape[0], q.shape[1], q.shape[2] / 2])
        .unwrap();
    let e = expect_err(run_case(&ctx, case, &inputs, &outputs, |a| a.q = Some(&q_f32)));
    assert_eq!(e.function(), "dsv4_run");
    assert!(e.message().contains('q'), "{}", e);
    assert!(e.to_string().contains(e.status_name()), "{}", e);

    // Null where required: no output.
    let e = expect_err(run_case(&ctx, case, &inputs, &outputs, |a| a.out = None));
    assert_eq!(e.status(), sys::DSV4_STATUS_INVALID_ARGUMENT);
    assert!(e.message().contains("out"), "{}", e);

    // A workspace that is too small.
    let mut small = [0u8; 1];
    let plan = ctx.plan(&plan_options(case)).unwrap();
    if plan.workspace_size().unwrap() > 1 {
        let e = expect_err(run_case(&ctx, case, &inputs, &outputs, |a| {
            a.workspace = Workspace::Host(&mut small)
        }));
        assert_eq!(e.status(), sys::DSV4_STATUS_WORKSPACE_TOO_SMALL, "{}", e);
    }

    // Short buffer: the binding's own check.
    let short = vec![Bf16(0); 10];
    let e = Tensor::new(&short, &[2, 8, 512]).err().expect("a short buffer was accepted");
    assert_eq!(e.status(), sys::DSV4_STATUS_INVALID_ARGUMENT);
    assert!(e.message().contains("shorter"), "{}", e);
    let e = Tensor::new(&short, &[2, 5]).unwrap().with_strides(&[6, 1]).err().expect("strides");
    assert!(e.message().contains("shorter"), "{}", e);

    // A read-only buffer as an output.
    let e = expect_err(run_case(&ctx, case, &inputs, &outputs, |a| a.out = a.q));
    assert!(e.message().contains("read-only"), "{}", e);

    // Bad plan options: libdsv4 names the field.
    let mut options = plan_options(case);
    options.num_heads = 0;
    let e = ctx.plan(&options).err().expect("num_heads 0 was accepted");
    assert_eq!(e.function(), "dsv4_plan_create");
    assert!(e.message().contains("num_heads"), "{}", e);

    // dsv4_merge without its parts.
    let e = ctx
        .merge(&dsv4::MergeArgs { out: Some(&outputs[0]), ..Default::default() })
        .expect_err("a merge without parts ran");
    assert_eq!(e.function(), "dsv4_merge");
    assert!(e.message().contains("out_parts"), "{}", e);

    // No such backend.
    let e = Context::new(&dsv4::ContextOptions {
        backend: Some("no-such-backend".into()),
        ..Default::default()
    })
    .err()
    .expect("a missing backend was found");
    assert_eq!(e.status(), sys::DSV4_STATUS_NO_BACKEND);
}

#[test]
fn kv_write_export_and_queries() {
    let ctx = Context::cpu().unwrap();
    let rows: Vec<Bf16> = (0..2 * 512).map(|i| Bf16(0x3f00 + (i % 97) as u16)).collect();
    let slots = [4i32, -1];
    let mut cache = vec![Bf16(0xffff); 2 * 3 * 512];
    {
        let cache_t = Tensor::new_mut(&mut cache, &[2, 3, 512]).unwrap();
        ctx.kv_write(
            &dsv4::cache_desc(sys::DSV4_KV_LAYOUT_BF16, 3, 0),
            &Tensor::new(&rows, &[2, 512]).unwrap(),
            &Tensor::new(&slots, &[2]).unwrap(),
            &cache_t,
        )
        .unwrap();
    }
    assert_eq!(&cache[4 * 512..5 * 512], &rows[..512]);
    assert_eq!(cache[3 * 512], Bf16(0xffff));

    let (_, cases) = load();
    let case = cases.iter().find(|c| c.name == "paged_c4a_fp8_mtp").unwrap();
    let plan = ctx.plan(&plan_options(case)).unwrap();
    let inputs: Vec<Tensor<'_>> = case
        .inputs
        .iter()
        .map(|i| Tensor::from_bytes(&i.bytes, i.dtype, &i.shape).unwrap())
        .collect();
    let slot_mapping = case.inputs.iter().find(|i| i.name == "slot_mapping").unwrap();
    let t = slot_mapping.shape[0] as usize;
    let (mut swa, mut lengths) = (vec![7i32; t * 128], vec![7i32; t]);
    {
        let swa_t = Tensor::new_mut(&mut swa, &[t as i64, 128]).unwrap();
        let lengths_t = Tensor::new_mut(&mut lengths, &[t as i64]).unwrap();
        let mut batch = RunArgs::default();
        for (x, i) in inputs.iter().zip(&case.inputs) {
            batch.set(&i.name, x).unwrap();
        }
        let mut export = ExportArgs::new(sys::DSV4_EXPORT_FLASHMLA, batch);
        export.swa_indices = Some(&swa_t);
        export.swa_lengths = Some(&lengths_t);
        plan.export_indices(&export).unwrap();
    }
    for token in 0..t {
        let b = &slot_mapping.bytes[4 * token..4 * token + 4];
        let slot = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        if slot < 0 {
            assert_eq!(lengths[token], 0);
        } else {
            assert_eq!(swa[token * 128 + lengths[token] as usize - 1], slot, "token {}", token);
        }
    }

    assert_eq!(dsv4::version().unwrap().split('.').count(), 3);
    let info = dsv4::kv_layout_info(sys::DSV4_KV_LAYOUT_FP8_V4_584B, 64).unwrap();
    assert_eq!((info.bytes_per_token, info.min_block_stride_bytes), (584, 37440));
    assert!(dsv4::kv_layout_info(999, 64).is_err());
    let backends = dsv4::enumerate_backends(&Default::default()).unwrap();
    assert!(backends.iter().any(|b| b.name == "cpu" && b.available));
    assert!(!plan.info().unwrap().kernel.is_empty());
    plan.close();
}

#[test]
fn contexts_and_plans_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Context>();
    send_sync::<dsv4::Plan>();
}
