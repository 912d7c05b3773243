//! Pretrained checkpoints loaded as Hugging Face transformers' `from_pretrained` loads them.

use std::path::Path;

use libaccel_sys as sys;

use crate::error::{Error, Result, Status};
use crate::ffi::{c_string, make, path_string, read_text, take_bytes_list};
use crate::model::Model;

/// The options of [`Model::load_pretrained`]; [`new`](PretrainedOptions::new) (or `default`) is
/// transformers' `from_pretrained` default: not strict, no base model prefix, any shape mismatch
/// an error.
///
/// ```
/// use libaccel::PretrainedOptions;
/// let options = PretrainedOptions::new().base_model_prefix("bert").strict(false);
/// assert_eq!(options.spec()?, "strict=false base_model_prefix=bert");
/// assert_eq!(PretrainedOptions::new().spec()?, "");
/// # Ok::<(), libaccel::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PretrainedOptions {
    strict: Option<bool>,
    base_model_prefix: Option<String>,
    ignore_mismatched_sizes: Option<bool>,
    model_name: Option<String>,
    architecture_matches: Option<bool>,
}

impl PretrainedOptions {
    /// Every option at the library's default.
    pub fn new() -> Self {
        Self::default()
    }

    /// Anything missing, unexpected or mismatched is an error ([`Status::InvalidArgument`], or
    /// [`Status::Shape`] for shapes); otherwise (the default) missing tensors keep their
    /// initialisation and checkpoint tensors the model lacks are left (the fine-tune of a new
    /// head).
    #[must_use]
    pub fn strict(mut self, strict: bool) -> Self {
        self.strict = Some(strict);
        self
    }

    /// transformers' `base_model_prefix` (`"bert"`), decided once per load: a checkpoint of the
    /// base model (`"encoder.x"`) loads into a model holding it under the prefix
    /// (`"bert.encoder.x"`), and a task checkpoint (`"bert.x"`) into the base model (`"x"`).
    /// An empty prefix is none (the default).
    #[must_use]
    pub fn base_model_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.base_model_prefix = Some(prefix.into());
        self
    }

    /// Not strict: a tensor of another shape keeps the model's and is reported in
    /// [`LoadReport::mismatched`]; otherwise (the default) any shape mismatch is
    /// [`Status::Shape`].
    #[must_use]
    pub fn ignore_mismatched_sizes(mut self, ignore: bool) -> Self {
        self.ignore_mismatched_sizes = Some(ignore);
        self
    }

    /// The model's name in the report's messages (`"BertForSequenceClassification"`); empty or
    /// not given: `"the model"`.
    #[must_use]
    pub fn model_name(mut self, name: impl Into<String>) -> Self {
        self.model_name = Some(name.into());
        self
    }

    /// The checkpoint was made for this very architecture (transformers'
    /// `config.architectures`): unexpected tensors are then a warning, otherwise (the default)
    /// information.
    #[must_use]
    pub fn architecture_matches(mut self, matches: bool) -> Self {
        self.architecture_matches = Some(matches);
        self
    }

    /// The options given as the string form takes them, `(key, value)`, in the order above; an
    /// empty text value is left out (the default).
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let flag = |key, value: Option<bool>| value.map(|v| (key, v.to_string()));
        let text = |key, value: &Option<String>| {
            value
                .as_ref()
                .filter(|v| !v.is_empty())
                .map(|v| (key, v.clone()))
        };
        [
            flag("strict", self.strict),
            text("base_model_prefix", &self.base_model_prefix),
            flag("ignore_mismatched_sizes", self.ignore_mismatched_sizes),
            text("model_name", &self.model_name),
            flag("architecture_matches", self.architecture_matches),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// The options as [`Model::load_pretrained_spec`] takes them
    /// (`"strict=true base_model_prefix=bert"`). A text value holding a separator of that form
    /// (space, comma, tab, newline) is [`Status::InvalidArgument`] here rather than another
    /// option there.
    pub fn spec(&self) -> Result<String> {
        let pairs = self.pairs();
        if let Some((key, value)) = pairs
            .iter()
            .find(|(_, v)| v.contains([' ', ',', '\t', '\n']))
        {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("load option {key}: {value:?} holds a space, comma, tab or newline"),
            ));
        }
        let pairs: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        Ok(pairs.join(" "))
    }
}

/// What [`Model::load_pretrained`] found and did, as transformers reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// The model's tensors no checkpoint tensor filled (they keep their initialisation), sorted,
    /// in the checkpoint's naming (transformers' keys).
    pub missing: Vec<String>,
    /// The checkpoint's tensors not used, sorted.
    pub unexpected: Vec<String>,
    /// The tensors left for their shape ([`PretrainedOptions::ignore_mismatched_sizes`]), sorted.
    pub mismatched: Vec<String>,
    /// transformers' WARNING messages (its default verbosity), each starting with `"WARNING: "`.
    pub warnings: String,
    /// Every message, the INFO ones (`"INFO: "`) too, in transformers' order and words.
    pub text: String,
}

impl Model {
    /// Loads a pretrained checkpoint into the model as Hugging Face transformers'
    /// `from_pretrained` does (4.4x): from a safetensors file, a `model.safetensors.index.json`,
    /// or a directory holding either (as [`load_checkpoint_in_model`](crate::load_checkpoint_in_model)),
    /// and returns its report.
    ///
    /// Floating checkpoint tensors are cast to the model's dtype (fp16 and bf16 into fp32 and
    /// back); a floating tensor for an integer one, or the other way, is [`Status::Dtype`].
    /// Tensors that share storage (tied weights) count as loaded when one of them is. An
    /// unreadable file is [`Status::Io`]. On any error found before the tensors' bytes are read
    /// (files, headers, dtypes, the plan) the model is unchanged; a read failing midway is
    /// [`Status::Io`] saying the model is partly loaded.
    pub fn load_pretrained(
        &mut self,
        path: impl AsRef<Path>,
        options: &PretrainedOptions,
    ) -> Result<LoadReport> {
        self.load_pretrained_spec(path, &options.spec()?)
    }

    /// [`load_pretrained`](Model::load_pretrained) with the options as text, `key=value` pairs
    /// (`"strict=true base_model_prefix=bert"`; keys as [`PretrainedOptions`]' methods), checked
    /// by the library.
    pub fn load_pretrained_spec(
        &mut self,
        path: impl AsRef<Path>,
        options: &str,
    ) -> Result<LoadReport> {
        let path = path_string(path.as_ref())?;
        let options = c_string(options, "options")?;
        // SAFETY: live handle, NUL-terminated strings, valid out pointer.
        let raw = make(|out| unsafe {
            sys::accel_load_pretrained(self.as_raw(), path.as_ptr(), options.as_ptr(), out)
        })?;
        let report = Report(raw);
        Ok(LoadReport {
            missing: report.keys("missing")?,
            unexpected: report.keys("unexpected")?,
            mismatched: report.keys("mismatched")?,
            warnings: report.text(true)?,
            text: report.text(false)?,
        })
    }
}

/// The library's report, freed when the call that read it returns (or fails).
struct Report(*mut sys::accel_load_report);

impl Report {
    fn keys(&self, kind: &str) -> Result<Vec<String>> {
        let kind = c_string(kind, "kind")?;
        // SAFETY: live report, NUL-terminated kind, valid out pointer.
        let list = make(|out| unsafe { sys::accel_load_report_keys(self.0, kind.as_ptr(), out) })?;
        Ok(take_bytes_list(list)?
            .into_iter()
            .map(|name| String::from_utf8_lossy(&name).into_owned())
            .collect())
    }

    fn text(&self, warnings_only: bool) -> Result<String> {
        // SAFETY: live report; buffer from read_text.
        read_text(|buf, cap, size| unsafe {
            sys::accel_load_report_text(self.0, warnings_only, buf, cap, size)
        })
    }
}

impl Drop for Report {
    fn drop(&mut self) {
        // SAFETY: the report is ours and freed once, here.
        unsafe { sys::accel_load_report_free(self.0) }
    }
}
