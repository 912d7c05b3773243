//! train_text.rs - a byte-level transformer language model trained on real text with libaccel,
//! then batched inference split across processes.
//!
//!   target/debug/examples/train_text                      one process
//!   accel launch -n 2 target/debug/examples/train_text    two processes, same code
//!   options: --epochs N (1) --batch-size B (32, per process) --lr X (4e-3) --max-steps S (0: whole
//!            epochs) --max-length L (128) --no-grouping --data DIR (/usr/share/games/fortunes)
//!
//! The same program as examples/c/train_text.c, with the same model, data, order, schedule and
//! output. The text is Debian's `fortunes` package: 15,000 quotations, jokes and verses of 1 to
//! 4,000 bytes, plain text files with one `%` line between entries. Each entry is one sample, so
//! the samples have real, widely varying lengths. One in ten is held out.
//!
//! Training: each sample's bytes are a ragged field ([`Dataset::from_ragged_fn`]), padded per
//! batch with an attention mask, truncated to --max-length, batched by similar lengths
//! (`group_by_length`) unless --no-grouping. The loss is the mean next-byte cross entropy over
//! real (unmasked) bytes. After training: the held-out perplexity (exp of the mean cross entropy
//! per byte over every process's bytes), then every held-out entry scored once, split between the
//! processes with `split_between_processes` and gathered, and the least and most surprising
//! entries printed. Progress lines go through the accelerator's logger at info level (the `log`
//! facade; examples/stderr_log writes them as the C program's), the results to standard output;
//! the loss, learning rate, samples/s and bytes/s every 10 steps and the held-out perplexity go to
//! the trackers the configuration's `log_with` names (none by default).

mod stderr_log;

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use accel::layers::{Embedding, LayerNorm, Linear};
use accel::optimizers::AdamW;
use accel::schedules::Cosine;
use accel::{
    fields, Accelerator, BoxError, DataLoader, DataLoaderOptions, Dataset, Dtype, Field, Model,
    Optimizer, Padding, Scheduler, Tensor, Values,
};

/// d_model 128, 4 heads of 32, MLP 512, 2 blocks, positions up to 512. The attention is causal,
/// so with right padding a real byte never sees a padded one and needs no key mask.
const SOURCE: &str = "\
def attention(self, x, wqkv, bqkv, wo, bo):
    B = x.size(0)
    T = x.size(1)
    qkv = torch.linear(x, wqkv, bqkv).view(B, T, 3, 4, 32).permute(2, 0, 3, 1, 4)
    causal = torch.ones([T, T], device=x.device).triu(1) > 0.5
    att = torch.matmul(qkv[0], qkv[1].transpose(-2, -1)) * 0.17677669529663687
    att = torch.softmax(att.masked_fill(causal, -1e9), -1)
    y = torch.matmul(att, qkv[2]).transpose(1, 2).reshape(B, T, 128)
    return torch.linear(y, wo, bo)

def forward(self, tokens):
    T = tokens.size(1)
    x = self.tok.forward(tokens.long())
    x = x + self.pos.forward(torch.arange(T, device=tokens.device))
    x = x + self.attention(self.ln1a.forward(x), self.qkva.weight, self.qkva.bias,
                           self.outa.weight, self.outa.bias)
    x = x + self.fc2a.forward(torch.gelu(self.fc1a.forward(self.ln2a.forward(x))))
    x = x + self.attention(self.ln1b.forward(x), self.qkvb.weight, self.qkvb.bias,
                           self.outb.weight, self.outb.bias)
    x = x + self.fc2b.forward(torch.gelu(self.fc1b.forward(self.ln2b.forward(x))))
    return self.head.forward(self.lnf.forward(x))

def byte_losses(self, tokens, mask):
    logits = self.forward(tokens[:, :-1])
    ce = torch.cross_entropy_loss(logits.transpose(1, 2), tokens[:, 1:].long(), None, 0)
    return ce * mask[:, 1:].float()

def training_step(self, tokens, mask):
    m = mask[:, 1:].float()
    return self.byte_losses(tokens, mask).sum() / m.sum().clamp_min(1.0)

def eval_sums(self, tokens, mask):
    return torch.stack([self.byte_losses(tokens, mask).sum(1), mask[:, 1:].float().sum(1)], 1)

def entry_losses(self, tokens, mask):
    m = mask[:, 1:].float()
    return self.byte_losses(tokens, mask).sum(1) / m.sum(1).clamp_min(1.0)
";

struct Options {
    epochs: i64,
    batch: i64,
    lr: f64,
    max_steps: i64,
    max_length: i64,
    grouping: bool,
    data: String,
}

fn parse_args() -> Result<Options, String> {
    let mut o = Options {
        epochs: 1,
        batch: 32,
        lr: 4e-3,
        max_steps: 0,
        max_length: 128,
        grouping: true,
        data: "/usr/share/games/fortunes".to_string(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next().ok_or_else(|| {
                format!(
                    "{name} needs a value (see the comment at the top of {})",
                    file!()
                )
            })
        };
        let number = |text: String, name: &str| {
            text.parse::<i64>()
                .map_err(|_| format!("{name} takes an integer, not {text}"))
        };
        match arg.as_str() {
            "--epochs" => o.epochs = number(value(&arg)?, &arg)?,
            "--batch-size" => o.batch = number(value(&arg)?, &arg)?,
            "--max-steps" => o.max_steps = number(value(&arg)?, &arg)?,
            "--max-length" => o.max_length = number(value(&arg)?, &arg)?,
            "--lr" => {
                let text = value(&arg)?;
                o.lr = text
                    .parse()
                    .map_err(|_| format!("--lr takes a number, not {text}"))?
            }
            "--no-grouping" => o.grouping = false,
            "--data" => o.data = value(&arg)?,
            _ => {
                return Err(format!(
                    "unknown option {arg} (see the comment at the top of {})",
                    file!()
                ))
            }
        }
    }
    Ok(o)
}

/// Entries of text, as bytes: the model reads bytes, and the text need not be UTF-8.
type Corpus = Vec<Vec<u8>>;

/// Adds an entry without its trailing newlines, unless nothing is left.
fn add_entry(corpus: &mut Corpus, mut entry: &[u8]) {
    while let [rest @ .., b'\n'] = entry {
        entry = rest;
    }
    if !entry.is_empty() {
        corpus.push(entry.to_vec());
    }
}

/// Splits one fortune file at its lines that are exactly "%".
fn read_fortunes(corpus: &mut Corpus, text: &[u8]) {
    let mut entry = 0;
    let mut line = 0;
    while line < text.len() {
        let next = text[line..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(text.len(), |end| line + end + 1);
        if matches!(&text[line..next], b"%\n" | b"%") {
            add_entry(corpus, &text[entry..line]);
            entry = next;
        }
        line = next;
    }
    add_entry(corpus, &text[entry..]);
}

/// Every fortune file in `dir` (not the .dat indexes, the .u8 links, nor ascii-art), in name
/// order, so every process builds the same corpus; entries 0, 10, 20, ... are held out.
fn load_corpus(dir: &Path) -> std::io::Result<(Corpus, Corpus)> {
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| {
            !(name.starts_with('.')
                || name.ends_with(".dat")
                || name.ends_with(".u8")
                || name == "ascii-art")
        })
        .collect();
    names.sort(); // byte order, as strcmp
    let mut all = Corpus::new();
    for name in &names {
        // A file that cannot be read is skipped, as the C example does.
        if let Ok(text) = std::fs::read(dir.join(name)) {
            read_fortunes(&mut all, &text);
        }
    }
    let (mut train, mut held_out) = (Corpus::new(), Corpus::new());
    for (i, entry) in all.into_iter().enumerate() {
        if i % 10 == 0 {
            held_out.push(entry);
        } else {
            train.push(entry);
        }
    }
    Ok((train, held_out))
}

/// A dataset of one ragged `u8` field: each entry's bytes.
fn text_dataset(corpus: &Arc<Corpus>) -> accel::Result<Dataset> {
    let (lengths_of, bytes_of) = (Arc::clone(corpus), Arc::clone(corpus));
    Dataset::from_ragged_fn(
        corpus.len() as i64,
        &[Field::ragged(Dtype::U8, &[])],
        move |i, lengths| {
            lengths[0] = lengths_of[i as usize].len() as i64;
            Ok(())
        },
        move |i, buffers| {
            let bytes = &bytes_of[i as usize];
            let wanted = buffers[0].len();
            let source = bytes.get(..wanted).ok_or_else(|| -> BoxError {
                format!("entry {i} has {} bytes, not {wanted}", bytes.len()).into()
            })?;
            buffers[0].copy_from_slice(source);
            Ok(())
        },
    )
}

fn build_model() -> accel::Result<Model> {
    let mut model = Model::new()?;
    model.add("tok", Embedding::new(256, 128))?;
    model.add("pos", Embedding::new(512, 128))?;
    for block in ["a", "b"] {
        model.add(&format!("ln1{block}"), LayerNorm::new(128))?;
        model.add(&format!("qkv{block}"), Linear::new(128, 384))?;
        model.add(&format!("out{block}"), Linear::new(128, 128))?;
        model.add(&format!("ln2{block}"), LayerNorm::new(128))?;
        model.add(&format!("fc1{block}"), Linear::new(128, 512))?;
        model.add(&format!("fc2{block}"), Linear::new(512, 128))?;
    }
    model.add("lnf", LayerNorm::new(128))?;
    model.add("head", Linear::new(128, 256))?;
    model.define(SOURCE)?;
    model.define(SCORE_SOURCE)?;
    Ok(model)
}

/// exp(mean cross entropy per byte) over the held-out entries of every process.
fn held_out_perplexity(
    acc: &Accelerator,
    model: &mut Model,
    held: &mut DataLoader,
) -> accel::Result<f64> {
    model.train(false)?;
    let (mut loss, mut bytes) = (0.0, 0.0);
    for batch in held {
        let [tokens, mask] = fields(batch?)?;
        let sums = model.call1("eval_sums", &[&tokens, &mask])?;
        // [loss sum, byte count] of each entry of every process; on the last batch the entries
        // repeated to even it out are dropped.
        let all = acc.gather_for_metrics(&sums)?.to_vec::<f32>()?;
        for pair in all.chunks_exact(2) {
            loss += f64::from(pair[0]);
            bytes += f64::from(pair[1]);
        }
    }
    Ok((loss / if bytes > 0.0 { bytes } else { 1.0 }).exp())
}

/// The first `max` bytes of an entry (fewer at a character boundary) on one line.
fn preview(entry: &[u8], max: usize) -> String {
    let mut text = String::new();
    for c in String::from_utf8_lossy(entry).chars() {
        if text.len() + c.len_utf8() > max {
            break;
        }
        text.push(if c == '\n' || c == '\t' { ' ' } else { c });
    }
    text
}

/// A method beside the model's, for batches made here rather than by a dataloader: those are on
/// the CPU, and the model may be on a GPU.
const SCORE_SOURCE: &str = "\
def score(self, tokens, mask):
    device = self.head.weight.device
    return self.entry_losses(tokens.to(device), mask.to(device))
";

/// A batch of entries as the held-out dataloader makes it: each entry's first `max_length`
/// bytes, padded with 0 on the right to the longest, and its attention mask.
fn pad_batch(entries: &[&[u8]], max_length: usize) -> accel::Result<(Tensor, Tensor)> {
    let width = entries
        .iter()
        .map(|e| e.len().min(max_length))
        .max()
        .unwrap_or(0);
    let mut tokens = vec![0u8; entries.len() * width];
    let mut mask = vec![0i64; entries.len() * width];
    for (row, entry) in entries.iter().enumerate() {
        let kept = &entry[..entry.len().min(width)];
        tokens[row * width..][..kept.len()].copy_from_slice(kept);
        mask[row * width..][..kept.len()].fill(1);
    }
    let shape = [entries.len() as i64, width as i64];
    Ok((
        Tensor::from_slice(&tokens, &shape)?,
        Tensor::from_slice(&mask, &shape)?,
    ))
}

/// Scores every held-out entry once: the processes split the entries (padded so all have as
/// many), each scores its share in batches, and the per-entry losses are gathered in entry order.
fn score_entries(
    acc: &Accelerator,
    model: &Model,
    held: &Corpus,
    max_length: i64,
) -> accel::Result<()> {
    let mine = acc.split_between_processes(&(0..held.len()).collect::<Vec<_>>(), true)?;
    // The share is batched here, not by a DataLoader: a dataloader always gives its process one
    // shard of the batches (even when not prepared), so it would score a part of the share only.
    let mut losses: Vec<f32> = Vec::with_capacity(mine.len());
    for chunk in mine.chunks(32) {
        let entries: Vec<&[u8]> = chunk.iter().map(|&i| held[i].as_slice()).collect();
        let (tokens, mask) = pad_batch(&entries, max_length as usize)?;
        losses.extend(model.call1("score", &[&tokens, &mask])?.to_vec::<f32>()?);
    }
    // Every process holds as many scores (padding included): gathered in rank order, which is
    // entry order; the padding repeats an entry and is dropped by its index. A plain gather, not
    // gather_for_metrics: no dataloader's duplicates are in these rows.
    let indices: Vec<i64> = mine.iter().map(|&i| i as i64).collect();
    let shape = [mine.len() as i64];
    let scores = acc
        .gather(&Tensor::from_slice(&losses, &shape)?)?
        .to_vec::<f32>()?;
    let index = acc
        .gather(&Tensor::from_slice(&indices, &shape)?)?
        .to_vec::<i64>()?;
    let mut scored: Vec<(f32, usize)> = Vec::new();
    for (i, (&score, &entry)) in scores.iter().zip(&index).enumerate() {
        if i > 0 && entry <= index[i - 1] {
            continue; // padding: an entry seen already
        }
        scored.push((score, entry as usize));
    }
    acc.print(&format!(
        "scored {} held-out entries ({} per process, padding dropped)",
        scored.len(),
        mine.len()
    ))?;
    // A one-byte entry has nothing to predict (a loss of 0): not a candidate.
    let candidates = || scored.iter().filter(|&&(_, entry)| held[entry].len() >= 2);
    let best = candidates().min_by(|a, b| a.0.total_cmp(&b.0));
    let worst = candidates().max_by(|a, b| a.0.total_cmp(&b.0));
    if let (Some(&(low, best)), Some(&(high, worst))) = (best, worst) {
        acc.print(&format!(
            "least surprising ({low:.2} nats/byte): {}",
            preview(&held[best], 120)
        ))?;
        acc.print(&format!(
            "most surprising ({high:.2} nats/byte): {}",
            preview(&held[worst], 120)
        ))?;
    }
    Ok(())
}

/// C's `%.2e`: at least two exponent digits (`1.33e-03`, where Rust writes `1.33e-3`).
fn c_exp(x: f64) -> String {
    let text = format!("{x:.2e}");
    match text.split_once('e') {
        Some((mantissa, exponent)) => {
            let (sign, digits) = match exponent.strip_prefix('-') {
                Some(digits) => ('-', digits),
                None => ('+', exponent),
            };
            format!("{mantissa}e{sign}{digits:0>2}")
        }
        None => text,
    }
}

fn run(o: &Options, train_text: Corpus, held_text: Corpus) -> accel::Result<()> {
    let (train_text, held_text) = (Arc::new(train_text), Arc::new(held_text));
    let acc = Accelerator::new()?;
    let world = i64::from(acc.num_processes()?);
    acc.set_seed(1234, false)?;
    let mut model = build_model()?;
    let params = model.parameter_element_count()?;

    let train_set = text_dataset(&train_text)?;
    let held_set = text_dataset(&held_text)?;
    let padding = Padding::new()
        .max_length(Some(o.max_length))
        .truncation(true);
    let train_options = DataLoaderOptions::new()
        .batch_size(o.batch)
        .shuffle(true)
        .seed(42)
        .group_by_length(o.grouping)
        .num_workers(1)
        .padding(padding);
    let mut train = DataLoader::with(&acc, &train_set, train_options)?;
    let held_options = DataLoaderOptions::new().batch_size(32).padding(padding);
    let mut held = DataLoader::with(&acc, &held_set, held_options)?;

    // A dataset of known length: batch_count is Some.
    let steps_per_epoch = train.batch_count()?.expect("a sized dataset");
    let mut total_steps = steps_per_epoch * o.epochs;
    if o.max_steps > 0 && o.max_steps < total_steps {
        total_steps = o.max_steps;
    }
    let mut opt = Optimizer::with(&model, AdamW::new().lr(o.lr).weight_decay(0.01))?;
    // The scheduler advances once per process per step (accel_scheduler_new): written for
    // total_steps * world.
    let schedule = Cosine::new(total_steps * world).warmup_steps(total_steps * world / 20);
    let mut sched = Scheduler::with(&opt, schedule)?;
    acc.prepare((&mut model, &mut opt, &mut sched, &mut train, &mut held))?;
    acc.logger().info(format!(
        "train_text: {} train / {} held-out entries, {world} process(es), {params} parameters, \
         {total_steps} steps, batches {}",
        train_text.len(),
        held_text.len(),
        if o.grouping {
            "grouped by length"
        } else {
            "in random order"
        }
    ))?;
    let config = Values::from_pairs([
        ("lr", o.lr),
        ("batch_size", o.batch as f64),
        ("max_length", o.max_length as f64),
        ("processes", world as f64),
    ])?;
    acc.init_trackers("train_text", Some(&config))?;

    let mut step = 0i64;
    let start = Instant::now();
    let (mut tokens, mut padded) = (0.0f64, 0.0f64);
    let mut epoch = 0;
    while epoch < o.epochs && step < total_steps {
        train.set_epoch(epoch)?;
        model.train(true)?;
        for batch in &mut train {
            let [bytes, mask] = fields(batch?)?;
            let shape = bytes.shape()?;
            tokens += mask.to_vec::<i64>()?.iter().sum::<i64>() as f64;
            padded += (shape[0] * shape[1]) as f64;
            let loss = model.call1("training_step", &[&bytes, &mask])?;
            acc.backward(&loss)?;
            acc.clip_grad_norm(&model, 1.0, 2.0)?;
            opt.step()?;
            sched.step()?;
            opt.zero_grad()?;
            if step % 10 == 0 || step + 1 == total_steps {
                let (secs, value, lr) = (
                    start.elapsed().as_secs_f64(),
                    loss.item::<f64>()?,
                    sched.lr()?,
                );
                let values = Values::new()?
                    .number("loss", value)?
                    .number("lr", lr)?
                    .number(
                        "samples_per_s",
                        ((step + 1) * o.batch * world) as f64 / secs,
                    )?
                    .number("bytes_per_s", tokens * world as f64 / secs)?;
                acc.log(&values, Some(step as u64))?;
                if step % 50 == 0 || step + 1 == total_steps {
                    acc.logger().info(format!(
                        "step {step}/{total_steps}  loss {value:.3}  lr {}  {:.0} bytes/s per \
                         process  {:.0}% padding",
                        c_exp(lr),
                        tokens / secs,
                        100.0 * (1.0 - tokens / padded)
                    ))?;
                }
            }
            step += 1;
            if step == total_steps {
                break; // the epoch stays in progress: no batch is read past the last step
            }
        }
        epoch += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    let ppl = held_out_perplexity(&acc, &mut model, &mut held)?;
    acc.print(&format!(
        "held-out perplexity {ppl:.3} per byte after {step} steps ({secs:.1} s, {:.0} real \
         bytes/s per process, {:.0}% of the batch was padding)",
        tokens / secs,
        100.0 * (1.0 - tokens / padded)
    ))?;
    // A language model's accuracy: its held-out perplexity.
    acc.log(
        &Values::new()?.number("perplexity", ppl)?,
        Some(step as u64),
    )?;
    acc.end_training()?;
    score_entries(&acc, &model, &held_text, o.max_length)?;
    acc.wait_for_everyone()
}

fn main() -> ExitCode {
    stderr_log::init();
    let options = match parse_args() {
        Ok(o) => o,
        Err(why) => {
            eprintln!("{why}");
            return ExitCode::from(2);
        }
    };
    let (train, held_out) = match load_corpus(Path::new(&options.data)) {
        Ok(corpus) => corpus,
        Err(e) => {
            eprintln!(
                "cannot open {}: {e}: install Debian's `fortunes` package",
                options.data
            );
            return ExitCode::FAILURE;
        }
    };
    match run(&options, train, held_out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("train_text failed: {e}");
            ExitCode::FAILURE
        }
    }
}
