//! minilm_tch.rs - a real pretrained model from Rust: sentence-transformers' all-MiniLM-L6-v2 (a
//! 6-layer BERT, 22.7M parameters) written with tch-rs, loaded from its Hugging Face folder as
//! transformers loads it, tokenised as Hugging Face's tokenizer does (libaccel's `Tokenizer`).
//! The Rust twin of examples/cpp/minilm/minilm.cpp, same commands and options:
//!
//!   minilm_tch embed MODEL_DIR FILE      384 numbers per line of FILE ("-": standard input), the
//!                                        sentence embedding as sentence-transformers computes it
//!   accel launch -n 2 minilm_tch finetune MODEL_DIR [--mode finetune|probe|scratch] [--steps N]
//!       [--batch-size B] [--lr X] [--max-length L] [--dropout P] [--categories a,b,...]
//!       [--data DIR] [--save DIR] [--seed S] [--trainer [--eval-steps N]]
//!
//! `--trainer` runs the same fine-tune through libaccel's `Trainer` (Rust closures as its
//! training and evaluation steps, accuracy through compute_metrics): bitwise the weights of the
//! hand-written loop (ctest tch.minilm_trainer_equals_loop), with an evaluation of the held-out
//! entries every --eval-steps steps (50).
//!
//! Built with the crate's `tch` feature, on the LibTorch that tch 0.24 pins (2.11).
use std::io::{BufRead, Write};
use std::sync::Arc;

use accel::optimizers::AdamW;
use accel::schedules::Linear as LinearSchedule;
use accel::tch;
use accel::tch::nn::{self, Module};
use accel::tch::{Kind, Tensor as T};
use accel::{
    fields, Accelerator, BoxError, DataLoader, DataLoaderOptions, Dataset, Dtype, EvalOutput,
    Field, Model, Optimizer, PretrainedOptions, Scheduler, Tensor, Tokenizer, Trainer,
};

/// The numbers of a Hugging Face BERT config.json that the forward needs.
#[derive(Clone, Copy)]
struct Config {
    vocab: i64,
    hidden: i64,
    layers: i64,
    heads: i64,
    intermediate: i64,
    positions: i64,
    type_vocab: i64,
    eps: f64,
    dropout: f64,
}

/// config.json is one flat object: a number is found after its quoted key.
fn number(json: &str, key: &str) -> Option<f64> {
    let rest = &json[json.find(&format!("\"{key}\""))? + key.len() + 2..];
    let rest = rest[rest.find(':')? + 1..].trim_start();
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || "+-.eE".contains(c)))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

fn read_config(dir: &str) -> Result<Config, BoxError> {
    let path = format!("{dir}/config.json");
    let json = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {path}: {e}"))?;
    if !json.contains("\"model_type\": \"bert\"") || !json.contains("\"hidden_act\": \"gelu\"") {
        return Err(format!("{dir}/config.json is not a BERT with exact GELU").into());
    }
    let get = |key: &str| number(&json, key).ok_or_else(|| format!("config.json lacks {key}"));
    Ok(Config {
        vocab: get("vocab_size")? as i64,
        hidden: get("hidden_size")? as i64,
        layers: get("num_hidden_layers")? as i64,
        heads: get("num_attention_heads")? as i64,
        intermediate: get("intermediate_size")? as i64,
        positions: get("max_position_embeddings")? as i64,
        type_vocab: get("type_vocab_size")? as i64,
        eps: get("layer_norm_eps")?,
        dropout: get("hidden_dropout_prob")?,
    })
}

/// transformers' initialisation: normal(0, 0.02) weights, zero biases.
fn linear(p: nn::Path, i: i64, o: i64) -> nn::Linear {
    let init = nn::Init::Randn {
        mean: 0.0,
        stdev: 0.02,
    };
    nn::linear(
        p,
        i,
        o,
        nn::LinearConfig {
            ws_init: init,
            bs_init: Some(nn::Init::Const(0.0)),
            bias: true,
        },
    )
}

fn embedding(p: nn::Path, n: i64, dim: i64) -> nn::Embedding {
    let ws_init = nn::Init::Randn {
        mean: 0.0,
        stdev: 0.02,
    };
    nn::embedding(
        p,
        n,
        dim,
        nn::EmbeddingConfig {
            ws_init,
            ..Default::default()
        },
    )
}

fn layer_norm(p: nn::Path, c: &Config) -> nn::LayerNorm {
    nn::layer_norm(
        p,
        vec![c.hidden],
        nn::LayerNormConfig {
            eps: c.eps,
            ..Default::default()
        },
    )
}

/// One encoder layer with transformers' names under `p` ("encoder.layer.N").
struct Layer {
    query: nn::Linear,
    key: nn::Linear,
    value: nn::Linear,
    attention_out: nn::Linear,
    attention_norm: nn::LayerNorm,
    intermediate: nn::Linear,
    out: nn::Linear,
    out_norm: nn::LayerNorm,
}

impl Layer {
    fn new(p: nn::Path, c: &Config) -> Layer {
        let (a, h) = (&p / "attention", c.hidden);
        Layer {
            query: linear(&a / "self" / "query", h, h),
            key: linear(&a / "self" / "key", h, h),
            value: linear(&a / "self" / "value", h, h),
            attention_out: linear(&a / "output" / "dense", h, h),
            attention_norm: layer_norm(&a / "output" / "LayerNorm", c),
            intermediate: linear(&p / "intermediate" / "dense", h, c.intermediate),
            out: linear(&p / "output" / "dense", c.intermediate, h),
            out_norm: layer_norm(&p / "output" / "LayerNorm", c),
        }
    }

    /// The same arithmetic in the same order as transformers' eager BertLayer.
    fn forward(&self, x: &T, mask_bias: &T, c: &Config, train: bool) -> T {
        let (b, l) = (x.size()[0], x.size()[1]);
        let d = c.hidden / c.heads;
        let split = |t: T| t.view([b, l, c.heads, d]).permute([0, 2, 1, 3]);
        let (q, k, v) = (
            split(self.query.forward(x)),
            split(self.key.forward(x)),
            split(self.value.forward(x)),
        );
        let scores = q.matmul(&k.transpose(-1, -2)) / (d as f64).sqrt() + mask_bias;
        let probs = scores.softmax(-1, Kind::Float).dropout(c.dropout, train);
        let context = probs
            .matmul(&v)
            .permute([0, 2, 1, 3])
            .contiguous()
            .view([b, l, c.hidden]);
        let a = self.attention_norm.forward(
            &(self
                .attention_out
                .forward(&context)
                .dropout(c.dropout, train)
                + x),
        );
        let inner = self.intermediate.forward(&a).gelu("none");
        self.out_norm
            .forward(&(self.out.forward(&inner).dropout(c.dropout, train) + &a))
    }
}

/// BertModel without its pooler, and sentence-transformers' mean pooling over the mask.
struct Bert {
    words: nn::Embedding,
    positions: nn::Embedding,
    types: nn::Embedding,
    norm: nn::LayerNorm,
    layers: Vec<Layer>,
    config: Config,
}

impl Bert {
    fn new(p: nn::Path, c: Config) -> Bert {
        let e = &p / "embeddings";
        Bert {
            words: embedding(&e / "word_embeddings", c.vocab, c.hidden),
            positions: embedding(&e / "position_embeddings", c.positions, c.hidden),
            types: embedding(&e / "token_type_embeddings", c.type_vocab, c.hidden),
            norm: layer_norm(&e / "LayerNorm", &c),
            layers: (0..c.layers)
                .map(|i| Layer::new(&p / "encoder" / "layer" / i, &c))
                .collect(),
            config: c,
        }
    }

    fn pooled(&self, ids: &T, mask: &T, train: bool) -> T {
        let c = &self.config;
        let positions = T::arange(ids.size()[1], (Kind::Int64, ids.device()));
        let x = self.words.forward(ids) + self.types.forward(&ids.zeros_like());
        let x = (x + self.positions.forward(&positions))
            .apply(&self.norm)
            .dropout(c.dropout, train);
        // transformers' extended attention mask: (1 - mask) * the lowest float.
        let m = mask.to_kind(Kind::Float).unsqueeze(1).unsqueeze(2);
        let bias = (1.0 - m) * f64::from(f32::MIN);
        let states = self
            .layers
            .iter()
            .fold(x, |x, l| l.forward(&x, &bias, c, train));
        let m = mask.unsqueeze(-1).expand_as(&states).to_kind(Kind::Float);
        (states * &m).sum_dim_intlist(1, false, Kind::Float)
            / m.sum_dim_intlist(1, false, Kind::Float).clamp_min(1e-9)
    }
}

/// sentence-transformers' `max_seq_length` for this model.
const EMBED_MAX_LENGTH: usize = 256;

fn embed(model_dir: &str, file: &str) -> Result<(), BoxError> {
    let config = read_config(model_dir)?;
    let vs = nn::VarStore::new(tch::Device::Cpu);
    let bert = Bert::new(vs.root(), config);
    let mut model = Model::from_var_store(&vs)?;
    model.load_pretrained(model_dir, &PretrainedOptions::new())?;
    let tokenizer = Tokenizer::load(model_dir)?;
    let reader: Box<dyn BufRead> = if file == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::io::BufReader::new(std::fs::File::open(file)?))
    };
    let lines = reader.lines().collect::<Result<Vec<_>, _>>()?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let _no_grad = tch::no_grad_guard();
    for chunk in lines.chunks(32) {
        let texts: Vec<&str> = chunk.iter().map(String::as_str).collect();
        let (ids, mask) = tokenizer.encode_batch(&texts, EMBED_MAX_LENGTH)?;
        let e = bert.pooled(&ids.to_tch()?, &mask.to_tch()?, false);
        let e = &e / e.norm_scalaropt_dim(2, [1], true).clamp_min(1e-12);
        for row in 0..e.size()[0] {
            let values = Vec::<f32>::try_from(e.get(row))?;
            let text: Vec<String> = values.iter().map(|v| format!("{v:e}")).collect();
            writeln!(out, "{}", text.join(" "))?;
        }
    }
    Ok(())
}

struct Options {
    mode: String,
    data: String,
    save: Option<String>,
    categories: String,
    steps: i64,
    batch: i64,
    max_length: usize,
    seed: u64,
    lr: f64,
    dropout: Option<f64>,
    trainer: bool,
    eval_steps: i64,
}

fn parse_args(args: &[String]) -> Result<Options, BoxError> {
    let mut o = Options {
        mode: "finetune".into(),
        data: "/usr/share/games/fortunes".into(),
        save: None,
        categories: "art,computers,food,law,love,medicine,politics,science,sports,startrek".into(),
        steps: 300,
        batch: 16,
        max_length: 128,
        seed: 42,
        lr: 0.0,
        dropout: None,
        trainer: false,
        eval_steps: 50,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        if flag == "--trainer" {
            o.trainer = true;
            continue;
        }
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value"))?
            .clone();
        match flag.as_str() {
            "--mode" => o.mode = value,
            "--data" => o.data = value,
            "--save" => o.save = Some(value),
            "--categories" => o.categories = value,
            "--steps" => o.steps = value.parse()?,
            "--batch-size" => o.batch = value.parse()?,
            "--max-length" => o.max_length = value.parse()?,
            "--seed" => o.seed = value.parse()?,
            "--lr" => o.lr = value.parse()?,
            "--dropout" => o.dropout = Some(value.parse()?),
            "--eval-steps" => o.eval_steps = value.parse()?,
            _ => return Err(format!("unknown option {flag} (see the top of {})", file!()).into()),
        }
    }
    if !["finetune", "probe", "scratch"].contains(&o.mode.as_str()) {
        return Err("--mode is finetune, probe or scratch".into());
    }
    if o.lr == 0.0 {
        o.lr = if o.mode == "finetune" { 5e-5 } else { 1e-3 };
    }
    Ok(o)
}

/// Debian's fortunes by category file, entry n of a file held out when n % 5 == 4 (as the C++
/// example): (text, label) for training and for evaluation.
type Entries = Vec<(String, i64)>;

fn read_fortunes(dir: &str, categories: &[&str]) -> Result<(Entries, Entries), BoxError> {
    let (mut train, mut held) = (Entries::new(), Entries::new());
    for (label, name) in categories.iter().enumerate() {
        let bytes = std::fs::read(format!("{dir}/{name}"))?;
        let text = String::from_utf8_lossy(&bytes);
        let mut n = 0;
        for entry in text.split("\n%\n") {
            let entry = entry
                .trim_end_matches([' ', '\n'])
                .trim_start_matches("%\n");
            if entry.is_empty() || entry == "%" {
                continue;
            }
            let item = (entry.to_string(), label as i64);
            if n % 5 == 4 {
                held.push(item)
            } else {
                train.push(item)
            }
            n += 1;
        }
    }
    Ok((train, held))
}

/// Token ids (ragged) and a label per entry; a batch adds the ids' attention mask.
fn tokenized(
    tokenizer: &Tokenizer,
    entries: &Entries,
    max_length: usize,
) -> Result<Dataset, BoxError> {
    let mut ids = Vec::with_capacity(entries.len());
    for (text, _) in entries {
        ids.push(tokenizer.encode(text, max_length)?);
    }
    let (ids, labels) = (
        Arc::new(ids),
        Arc::new(entries.iter().map(|e| e.1).collect::<Vec<_>>()),
    );
    let lengths_of = Arc::clone(&ids);
    Ok(Dataset::from_ragged_fn(
        entries.len() as i64,
        &[Field::ragged(Dtype::I64, &[]), Field::new(Dtype::I64, &[])],
        move |i, lengths| {
            lengths[0] = lengths_of[i as usize].len() as i64;
            Ok(())
        },
        move |i, buffers| {
            let row = &ids[i as usize];
            for (chunk, id) in buffers[0].chunks_exact_mut(8).zip(row) {
                chunk.copy_from_slice(&id.to_ne_bytes());
            }
            buffers[1].copy_from_slice(&labels[i as usize].to_ne_bytes());
            Ok(())
        },
    )?)
}

fn finetune(model_dir: &str, o: &Options) -> Result<(), BoxError> {
    let acc = Accelerator::new()?;
    acc.set_seed(o.seed, false)?;
    let mut config = read_config(model_dir)?;
    if let Some(p) = o.dropout {
        config.dropout = p;
    }
    let categories: Vec<&str> = o.categories.split(',').filter(|c| !c.is_empty()).collect();
    let (train_entries, held_entries) = read_fortunes(&o.data, &categories)?;

    let vs = nn::VarStore::new(tch::Device::Cpu);
    let bert = Bert::new(&vs.root() / "bert", config);
    let head = linear(
        &vs.root() / "classifier",
        config.hidden,
        categories.len() as i64,
    );
    let mut model = Model::from_var_store(&vs)?;
    if o.mode != "scratch" {
        // The checkpoint is BertModel's ("embeddings.*"); the prefix rule puts it under "bert.".
        let options = PretrainedOptions::new()
            .base_model_prefix("bert")
            .model_name("MiniLMForSequenceClassification");
        let report = model.load_pretrained(model_dir, &options)?;
        if !report.warnings.is_empty() {
            acc.logger().info(&report.warnings)?;
        }
    }
    if o.mode == "probe" {
        // A linear probe: the encoder frozen, lent as buffers (copied from rank 0, never stepped)
        // to a new model, once the loading one is gone (a tensor is lent to one model at a time).
        drop(model);
        for (name, t) in vs.variables() {
            if name.starts_with("bert.") {
                let _ = t.set_requires_grad(false);
            }
        }
        model = Model::from_var_store(&vs)?;
    }

    let tokenizer = Tokenizer::load(model_dir)?;
    let train_set = tokenized(&tokenizer, &train_entries, o.max_length)?;
    let held_set = tokenized(&tokenizer, &held_entries, o.max_length)?;
    let mut train = DataLoader::with(
        &acc,
        &train_set,
        DataLoaderOptions::new()
            .batch_size(o.batch)
            .shuffle(true)
            .seed(7),
    )?;
    let mut held = DataLoader::with(&acc, &held_set, DataLoaderOptions::new().batch_size(32))?;
    let mut opt = Optimizer::with(&model, AdamW::new().lr(o.lr).weight_decay(0.01))?;
    let world = i64::from(acc.num_processes()?);
    // The schedule counts single-process optimizer steps (accel_scheduler_new).
    let schedule = LinearSchedule::new(o.steps * world).warmup_steps(o.steps / 10 * world);
    let mut sched = Scheduler::with(&opt, schedule)?;
    acc.prepare((&mut model, &mut opt, &mut sched, &mut train, &mut held))?;
    acc.logger().info(format!(
        "{world} process(es), {} training and {} held-out entries in {} categories, mode {}",
        train_entries.len(),
        held_entries.len(),
        categories.len(),
        o.mode
    ))?;

    if o.trainer {
        let encoder_train = o.mode != "probe";
        let accuracy = finetune_with_trainer(
            &acc,
            &mut model,
            (bert, head, config.dropout, encoder_train),
            (&mut opt, &mut sched),
            (&mut train, &held),
            o,
        )?;
        acc.print(&format!(
            "held-out accuracy {accuracy:.4} ({}, {} steps of {} x {world}, Trainer)",
            o.mode, o.steps, o.batch
        ))?;
        if let Some(dir) = &o.save {
            acc.save_model(&model, dir, None)?;
        }
        return Ok(());
    }

    let start = std::time::Instant::now();
    let (mut step, mut epoch, mut loss_avg) = (0i64, 0i64, 0.0f64);
    while step < o.steps {
        train.set_epoch(epoch)?;
        epoch += 1;
        model.train(true)?;
        for batch in &mut train {
            let [ids, labels, mask] = fields(batch?)?;
            let (ids, labels, mask) = (ids.to_tch()?, labels.to_tch()?, mask.to_tch()?);
            // probe: the frozen encoder without dropout either
            let encoder_train = o.mode != "probe";
            let loss = model.forward(|| {
                let pooled = bert.pooled(&ids, &mask, encoder_train);
                head.forward(&pooled.dropout(config.dropout, true))
                    .cross_entropy_for_logits(&labels)
            })?;
            acc.backward(&Tensor::from_tch(&loss)?)?;
            opt.step()?;
            sched.step()?;
            opt.zero_grad()?;
            let value = loss.double_value(&[]);
            loss_avg = if step == 0 {
                value
            } else {
                0.95 * loss_avg + 0.05 * value
            };
            step += 1;
            if step % 20 == 0 || step == o.steps {
                let per_step = start.elapsed().as_secs_f64() / step as f64;
                acc.logger().info(format!(
                    "step {step} loss {loss_avg:.4} ({per_step:.2} s per step)"
                ))?;
            }
            if step == o.steps {
                break;
            }
        }
    }

    // Held-out accuracy: every held-out entry counted once over all processes.
    model.train(false)?;
    let _no_grad = tch::no_grad_guard();
    let (mut correct, mut seen) = (0i64, 0i64);
    for batch in &mut held {
        let [ids, labels, mask] = fields(batch?)?;
        let (ids, labels, mask) = (ids.to_tch()?, labels.to_tch()?, mask.to_tch()?);
        let hits = model.forward(|| {
            head.forward(&bert.pooled(&ids, &mask, false))
                .argmax(1, false)
                .eq_tensor(&labels)
        })?;
        let all = acc.gather_for_metrics(&Tensor::from_tch(&hits.to_kind(Kind::Int64))?)?;
        let all = all.to_vec::<i64>()?;
        correct += all.iter().sum::<i64>();
        seen += all.len() as i64;
    }
    acc.print(&format!(
        "held-out accuracy {:.4} ({}, {step} steps of {} x {world})",
        correct as f64 / seen as f64,
        o.mode,
        o.batch
    ))?;
    if let Some(dir) = &o.save {
        acc.save_model(&model, dir, None)?;
    }
    Ok(())
}

/// The encoder, the head, the head's dropout and whether the encoder trains (not for a probe).
type Net = (Bert, nn::Linear, f64, bool);

/// The fine-tune through libaccel's Trainer: its step is the loop's (backward, optimizer and
/// scheduler steps, zero_grad; no clipping, as the loop has none), so the weights are bitwise the
/// loop's. Evaluates the held-out entries every `o.eval_steps` steps and at the end; returns the
/// last accuracy.
fn finetune_with_trainer(
    acc: &Accelerator,
    model: &mut Model,
    net: Net,
    (opt, sched): (&mut Optimizer, &mut Scheduler),
    (train, held): (&mut DataLoader, &DataLoader),
    o: &Options,
) -> Result<f64, BoxError> {
    let settings = format!(
        "max_steps={},logging_steps=20,eval_strategy=steps,eval_steps={},max_grad_norm=0,\
         save_strategy=no",
        o.steps, o.eval_steps
    );
    let mut trainer = Trainer::new(acc, model, opt, Some(sched), train, Some(held), &settings)?;
    // Shared by the two steps, which the Trainer calls on the thread running it (tch's tensors
    // are Send, not Sync).
    let net = Arc::new(std::sync::Mutex::new(net));
    let for_training = Arc::clone(&net);
    trainer.set_training_step(move |model, batch| {
        let net = for_training.lock().map_err(|_| "a step panicked")?;
        let (bert, head, dropout, encoder_train) = &*net;
        let (ids, labels, mask) = (batch[0].to_tch()?, batch[1].to_tch()?, batch[2].to_tch()?);
        let loss = model.forward(|| {
            head.forward(
                &bert
                    .pooled(&ids, &mask, *encoder_train)
                    .dropout(*dropout, true),
            )
            .cross_entropy_for_logits(&labels)
        })?;
        Ok(Tensor::from_tch(&loss)?)
    })?;
    trainer.set_eval_step(move |model, batch| {
        let net = net.lock().map_err(|_| "a step panicked")?;
        let (bert, head, _, _) = &*net;
        let (ids, labels, mask) = (batch[0].to_tch()?, batch[1].to_tch()?, batch[2].to_tch()?);
        let logits = model.forward(|| head.forward(&bert.pooled(&ids, &mask, false)))?;
        Ok(EvalOutput {
            loss: Some(Tensor::from_tch(&logits.cross_entropy_for_logits(&labels))?),
            predictions: Some(Tensor::from_tch(&logits.argmax(1, false))?),
            labels: Some(Tensor::from_tch(&labels)?),
        })
    })?;
    trainer.set_compute_metrics(|predictions, labels| {
        let hits = predictions.to_tch()?.eq_tensor(&labels.to_tch()?);
        let accuracy = hits
            .to_kind(Kind::Double)
            .mean(Kind::Double)
            .double_value(&[]);
        Ok([("accuracy", accuracy)])
    })?;
    trainer.train()?;
    let metrics = trainer.evaluate()?;
    Ok(metrics
        .get("eval_accuracy")
        .ok_or("the evaluation gave no accuracy")?)
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: minilm_tch embed MODEL_DIR FILE | minilm_tch finetune MODEL_DIR [options]";
    let result = match args.get(1).map(String::as_str) {
        Some("embed") if args.len() == 4 => embed(&args[2], &args[3]),
        Some("finetune") if args.len() >= 3 => {
            parse_args(&args[3..]).and_then(|o| finetune(&args[2], &o))
        }
        _ => {
            eprintln!("{usage}");
            return std::process::ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("minilm_tch: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
