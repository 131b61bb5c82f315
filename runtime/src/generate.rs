//! Sampling text from a model: its [`DecodeModel`]'s step program compiled for the prompt
//! (prefill: every prompt position at once) and for one position (decode), the layers' state
//! (key/value caches, recurrent states) kept on the device between calls and donated to each
//! call, and the next token chosen on the host from each row's logits: the most likely
//! (greedy, temperature 0) or one drawn at a temperature from the smallest set of tokens whose
//! probability reaches `top_p` (nucleus sampling).
//!
//! It runs on one device with the weights whole: a model that fits one device's memory.

use std::collections::HashMap;
use std::time::Instant;

use stackscan::decode::{DecodeModel, STEP_INPUTS};
use stackscan::rng::Rng;

use crate::error::{Error, Result};
use crate::mesh::Mesh;
use crate::pjrt::{Buffer, Client, Executable};

/// How the next token is chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// Softmax temperature; 0 picks the most likely token (greedy, the lowest id on a tie).
    pub temperature: f64,
    /// Nucleus: draw from the most likely tokens whose probabilities sum to at least this
    /// (1: every token).
    pub top_p: f64,
    /// Seed of the draws.
    pub seed: u64,
}

impl Sampling {
    /// Greedy decoding: always the most likely token.
    pub const GREEDY: Sampling = Sampling {
        temperature: 0.0,
        top_p: 1.0,
        seed: 0,
    };

    fn check(&self) -> Result<()> {
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return Err(Error::Generation(format!(
                "temperature {} must be 0 (greedy) or above",
                self.temperature
            )));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(Error::Generation(format!(
                "top-p {} must be above 0 and at most 1",
                self.top_p
            )));
        }
        Ok(())
    }
}

/// What [`Generator::generate`] made.
#[derive(Clone, Debug, PartialEq)]
pub struct Generation {
    /// Each prompt's new tokens, a stop token included (and nothing after it).
    pub tokens: Vec<Vec<i32>>,
    /// Seconds compiling programs this call did not find compiled.
    pub compile_seconds: f64,
    /// Seconds of the prompt's program (to the first new token's logits).
    pub prefill_seconds: f64,
    /// Seconds of the one-position programs and the sampling between them.
    pub decode_seconds: f64,
    /// One-position steps run.
    pub decode_steps: usize,
    /// Each chosen token's logits, `[step][row][vocab]`, when the generator keeps them
    /// ([`Generator::keeping_logits`]); empty otherwise.
    pub logits: Vec<Vec<Vec<f32>>>,
}

/// A model's weights on one device, ready to sample from ([`Generator::generate`]).
#[derive(Debug)]
pub struct Generator {
    client: Client,
    mesh: Mesh,
    model: DecodeModel,
    vocab: i64,
    weights: Vec<Buffer>,
    /// Compiled step programs by `(rows, new positions, capacity)`.
    programs: HashMap<(i64, i64, i64), Executable>,
    keep_logits: bool,
}

impl Generator {
    /// `model` on `client`'s first device with `weights` (each whole, f32, in
    /// [`DecodeModel::weight_types`] order: an outer weight as it is, a kind's stacked over its
    /// layers, as checkpoints hold them).
    pub fn new(client: &Client, model: DecodeModel, weights: &[Vec<f32>]) -> Result<Generator> {
        let given = weights.len();
        let types = model.weight_types().len();
        if given != types {
            return Err(Error::Generation(format!(
                "{given} weights given for a model of {types}"
            )));
        }
        Generator::load(client, model, |j| Ok(weights[j].clone()))
    }

    /// [`Generator::new`] with weight `j` from `weight(j)`, one at a time: each is uploaded
    /// before the next is read, so the host holds one weight, not the model.
    pub fn load(
        client: &Client,
        model: DecodeModel,
        mut weight: impl FnMut(usize) -> Result<Vec<f32>>,
    ) -> Result<Generator> {
        let types = model.weight_types();
        let names = crate::train::weight_names(model.model());
        let mesh = Mesh::new(client, "decode", 1)?;
        let device = &mesh.devices()[0];
        let mut buffers = Vec::with_capacity(types.len());
        for (j, (ty, name)) in types.iter().zip(&names).enumerate() {
            let w = weight(j)?;
            if w.len() as i64 != ty.dims.iter().product::<i64>() {
                return Err(Error::Generation(format!(
                    "weight `{name}` holds {} values for {ty}",
                    w.len()
                )));
            }
            buffers.push(client.buffer(&w, &ty.dims, device)?);
        }
        let vocab = model
            .model()
            .inputs
            .first()
            .and_then(|i| i.values.as_ref())
            .map_or(0, |r| r.end);
        Ok(Generator {
            client: client.clone(),
            mesh,
            model,
            vocab,
            weights: buffers,
            programs: HashMap::new(),
            keep_logits: false,
        })
    }

    /// The same generator returning every step's logits with its tokens
    /// ([`Generation::logits`]; `transformers`' `output_scores`).
    pub fn keeping_logits(mut self) -> Generator {
        self.keep_logits = true;
        self
    }

    /// The vocabulary: token ids lie in `0..vocab`.
    pub fn vocab(&self) -> i64 {
        self.vocab
    }

    /// Continues each prompt by up to `max_new` tokens, all prompts as one batch (each at its
    /// own length), stopping a row after a token of `stop`.
    pub fn generate(
        &mut self,
        prompts: &[Vec<i32>],
        max_new: usize,
        sampling: Sampling,
        stop: &[i32],
    ) -> Result<Generation> {
        sampling.check()?;
        if prompts.is_empty() || max_new == 0 {
            return Err(Error::Generation(
                "give at least one prompt and ask for at least one new token".into(),
            ));
        }
        for (r, p) in prompts.iter().enumerate() {
            if p.is_empty() {
                return Err(Error::Generation(format!("prompt {r} is empty")));
            }
            if let Some((i, t)) = p
                .iter()
                .enumerate()
                .find(|&(_, &t)| t < 0 || i64::from(t) >= self.vocab)
            {
                return Err(Error::Generation(format!(
                    "prompt {r}, token {i}: {t} is outside the vocabulary of {}",
                    self.vocab
                )));
            }
        }
        let rows = prompts.len() as i64;
        let longest = prompts.iter().map(Vec::len).max().unwrap_or(1) as i64;
        let capacity = longest + max_new as i64;
        let mut generation = Generation {
            tokens: vec![Vec::new(); prompts.len()],
            compile_seconds: 0.0,
            prefill_seconds: 0.0,
            decode_seconds: 0.0,
            decode_steps: 0,
            logits: Vec::new(),
        };
        let device = self.mesh.devices()[0].clone();
        let mut state = self
            .model
            .state_types(rows, capacity)
            .iter()
            .map(|t| {
                let zeros = vec![0.0f32; t.dims.iter().product::<i64>() as usize];
                self.client.buffer(&zeros, &t.dims, &device)
            })
            .collect::<Result<Vec<_>>>()?;

        // Prefill: every prompt position at once, right-padded with position −1.
        let started = Instant::now();
        let (mut tokens, mut positions) = (Vec::new(), Vec::new());
        for p in prompts {
            for t in 0..longest as usize {
                tokens.push(p.get(t).copied().unwrap_or(0));
                positions.push(if t < p.len() { t as i32 } else { -1 });
            }
        }
        let last: Vec<i32> = prompts.iter().map(|p| p.len() as i32 - 1).collect();
        let logits = self.run(
            (rows, longest, capacity),
            [&tokens, &positions, &last],
            &mut state,
            &mut generation.compile_seconds,
        )?;
        generation.prefill_seconds = started.elapsed().as_secs_f64() - generation.compile_seconds;

        let started = Instant::now();
        let compiled_before = generation.compile_seconds;
        let mut rng = Rng::new(sampling.seed);
        let mut done = vec![false; prompts.len()];
        let mut logits = logits;
        for step in 0..max_new {
            if self.keep_logits {
                generation.logits.push(
                    logits
                        .chunks(self.vocab as usize)
                        .map(<[f32]>::to_vec)
                        .collect(),
                );
            }
            let mut next = Vec::with_capacity(prompts.len());
            for (r, row) in logits.chunks(self.vocab as usize).enumerate() {
                let t = choose(row, sampling, &mut rng);
                if !done[r] {
                    generation.tokens[r].push(t);
                    done[r] = stop.contains(&t);
                }
                next.push(t);
            }
            if step + 1 == max_new || done.iter().all(|&d| d) {
                break;
            }
            let positions: Vec<i32> = prompts.iter().map(|p| (p.len() + step) as i32).collect();
            logits = self.run(
                (rows, 1, capacity),
                [&next, &positions, &vec![0; prompts.len()]],
                &mut state,
                &mut generation.compile_seconds,
            )?;
            generation.decode_steps += 1;
        }
        generation.decode_seconds =
            started.elapsed().as_secs_f64() - (generation.compile_seconds - compiled_before);
        Ok(generation)
    }

    /// Runs the step program of `shape` (compiled on first use) on `inputs` (tokens,
    /// positions, last) and the state, which it replaces; returns the logits.
    fn run(
        &mut self,
        shape: (i64, i64, i64),
        inputs: [&Vec<i32>; STEP_INPUTS],
        state: &mut Vec<Buffer>,
        compile_seconds: &mut f64,
    ) -> Result<Vec<f32>> {
        let (rows, tokens, capacity) = shape;
        if !self.programs.contains_key(&shape) {
            let program = self.model.step_program(rows, tokens, capacity)?;
            let started = Instant::now();
            let exe = self.client.compile_program(&program, &self.mesh)?;
            *compile_seconds += started.elapsed().as_secs_f64();
            self.programs.insert(shape, exe);
        }
        let Some(exe) = self.programs.get(&shape) else {
            return Err(Error::Program("the step program did not compile".into()));
        };
        let device = &self.mesh.devices()[0];
        let dims: [&[i64]; STEP_INPUTS] = [&[rows, tokens], &[rows, tokens], &[rows]];
        let host = inputs
            .iter()
            .zip(dims)
            .map(|(v, d)| self.client.buffer(v.as_slice(), d, device))
            .collect::<Result<Vec<_>>>()?;
        let args: Vec<&Buffer> = host
            .iter()
            .chain(&self.weights)
            .chain(state.iter())
            .collect();
        let mut out = exe
            .execute(&[args])?
            .into_iter()
            .next()
            .ok_or_else(|| Error::Program("the step program returned nothing".into()))?;
        if out.len() != 1 + state.len() {
            return Err(Error::Program(format!(
                "the step program returned {} results for {} state parts",
                out.len(),
                state.len()
            )));
        }
        let new_state = out.split_off(1);
        *state = new_state;
        out[0].to_host::<f32>()
    }
}

/// The next token from one row's logits.
fn choose(logits: &[f32], sampling: Sampling, rng: &mut Rng) -> i32 {
    if sampling.temperature == 0.0 {
        // The first of the largest, as `argmax` breaks ties.
        let mut best = 0;
        for (i, &l) in logits.iter().enumerate() {
            if l > logits[best] {
                best = i;
            }
        }
        return best as i32;
    }
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut p: Vec<(usize, f64)> = logits
        .iter()
        .enumerate()
        .map(|(i, &l)| (i, (f64::from(l - max) / sampling.temperature).exp()))
        .collect();
    let total: f64 = p.iter().map(|(_, w)| w).sum();
    p.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    // The nucleus: the most likely tokens until their mass reaches top_p.
    let mut kept = 0;
    let mut mass = 0.0;
    for (_, w) in &p {
        kept += 1;
        mass += w / total;
        if mass >= sampling.top_p {
            break;
        }
    }
    p.truncate(kept);
    let mut u = rng.next_f64() * p.iter().map(|(_, w)| w).sum::<f64>();
    for &(i, w) in &p {
        if u < w {
            return i as i32;
        }
        u -= w;
    }
    p.last().map_or(0, |&(i, _)| i as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_first_largest() {
        let mut rng = Rng::new(1);
        assert_eq!(
            choose(&[0.1, 3.0, 3.0, -1.0], Sampling::GREEDY, &mut rng),
            1
        );
    }

    #[test]
    fn a_small_nucleus_keeps_only_the_most_likely() {
        let mut rng = Rng::new(7);
        let s = Sampling {
            temperature: 1.0,
            top_p: 0.5,
            seed: 7,
        };
        // Token 2 holds e^4 / (e^4 + 3) of the mass, over half: a nucleus of 0.5 is it alone.
        for _ in 0..50 {
            assert_eq!(choose(&[0.0, 0.0, 4.0, 0.0], s, &mut rng), 2);
        }
    }

    #[test]
    fn draws_follow_the_tempered_distribution() {
        let mut rng = Rng::new(3);
        let s = Sampling {
            temperature: 2.0,
            top_p: 1.0,
            seed: 3,
        };
        // At temperature 2, logits (0, 2 ln 3) give probabilities 1/4 and 3/4.
        let logits = [0.0, 2.0 * 3f32.ln()];
        let n = 20_000;
        let ones = (0..n).filter(|_| choose(&logits, s, &mut rng) == 1).count();
        let share = ones as f64 / n as f64;
        assert!((share - 0.75).abs() < 0.015, "{share}");
    }

    #[test]
    fn bad_settings_are_named() {
        let hot = Sampling {
            temperature: -1.0,
            ..Sampling::GREEDY
        };
        assert!(hot.check().unwrap_err().to_string().contains("temperature"));
        let empty = Sampling {
            top_p: 0.0,
            ..Sampling::GREEDY
        };
        assert!(empty.check().unwrap_err().to_string().contains("top-p"));
    }
}
