//! What the typed options share: each type is a builder of the `key=value` pairs the string API
//! takes, so a misspelt key is a compile error while the library stays the one place that knows
//! defaults and checks values.

/// Keeps the option traits closed: a kind the library does not have cannot be written.
pub(crate) mod sealed {
    pub trait Sealed {}
}

/// Declares an options type: `required` values are arguments of `new`, each `optional` one a
/// builder method; `pairs` lists the set ones in declaration order (the order they are sent,
/// which matters where the library checks one option against another, as sgd's nesterov).
/// An optional `nested` section holds groups of options, each a type with its own `pairs`
/// (a dataloader's padding): a builder method each, their pairs sent after the others.
macro_rules! options_type {
    (
        $(#[$meta:meta])*
        $name:ident {
            required { $($req:ident: $rty:ty),* $(,)? }
            optional { $($(#[$odoc:meta])* $opt:ident: $oty:ty),* $(,)? }
            $(nested { $($(#[$ndoc:meta])* $nest:ident: $nty:ty),* $(,)? })?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq)]
        pub struct $name {
            $($req: $rty,)*
            $($opt: Option<$oty>,)*
            $($($nest: Option<$nty>,)*)?
        }

        impl $name {
            /// These options with the required values given and every other option at the
            /// library's default.
            pub fn new($($req: $rty),*) -> Self {
                $name { $($req,)* $($opt: None,)* $($($nest: None,)*)? }
            }

            $($(
                $(#[$ndoc])*
                #[must_use]
                pub fn $nest(mut self, $nest: $nty) -> Self {
                    self.$nest = Some($nest);
                    self
                }
            )*)?

            $(
                $(#[$odoc])*
                #[must_use]
                pub fn $opt(mut self, $opt: $oty) -> Self {
                    self.$opt = Some($opt);
                    self
                }
            )*

            /// The options as the string API takes them, `(key, value)`: the required ones, then
            /// each optional one given, in the order the type declares them (a nested group's
            /// after the others).
            pub fn pairs(&self) -> Vec<(&'static str, String)> {
                #[allow(unused_mut)]
                let mut pairs: Vec<(&'static str, String)> =
                    vec![$((stringify!($req), self.$req.to_string())),*];
                $(
                    if let Some(value) = &self.$opt {
                        pairs.push((stringify!($opt), value.to_string()));
                    }
                )*
                $($(
                    if let Some(group) = &self.$nest {
                        pairs.extend(group.pairs());
                    }
                )*)?
                pairs
            }
        }

        impl crate::options::sealed::Sealed for $name {}
    };
}
pub(crate) use options_type;

/// Declares `Default` as `new()` for an options type with nothing required.
macro_rules! default_is_new {
    ($($name:ident),* $(,)?) => {
        $(
            impl Default for $name {
                fn default() -> Self {
                    Self::new()
                }
            }
        )*
    };
}
pub(crate) use default_is_new;
