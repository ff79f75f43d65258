//! Floats that may be infinite or NaN, for serde: JSON has no such numbers (serde_json writes
//! `null`, which then fails to load), so a non-finite value is written as the string "inf",
//! "-inf" or "nan" and read back from either form. Masks (`-inf` fills), one-sided clips and
//! reductions' identities are such constants. Use with `#[serde(with = "...")]`.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum Repr<'a> {
    Number(f64),
    Name(std::borrow::Cow<'a, str>),
}

fn write<S: Serializer>(v: f64, s: S) -> Result<S::Ok, S::Error> {
    match v {
        v if v.is_finite() => Repr::Number(v),
        v if v.is_nan() => Repr::Name("nan".into()),
        v if v > 0.0 => Repr::Name("inf".into()),
        _ => Repr::Name("-inf".into()),
    }
    .serialize(s)
}

fn read<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    match Repr::deserialize(d)? {
        Repr::Number(v) => Ok(v),
        Repr::Name(n) => match n.as_ref() {
            "inf" => Ok(f64::INFINITY),
            "-inf" => Ok(f64::NEG_INFINITY),
            "nan" => Ok(f64::NAN),
            other => Err(serde::de::Error::custom(format!("'{other}' is not a number, 'inf', '-inf' or 'nan'"))),
        },
    }
}

pub mod f64 {
    use super::*;
    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        write(*v, s)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        read(d)
    }
}

/// A finite f32 in its own shortest form (0.1, not 0.10000000149011612: specs hash their JSON).
fn write_f32<S: Serializer>(v: f32, s: S) -> Result<S::Ok, S::Error> {
    if v.is_finite() {
        s.serialize_f32(v)
    } else {
        write(v as f64, s)
    }
}

pub mod f32 {
    use super::*;
    pub fn serialize<S: Serializer>(v: &f32, s: S) -> Result<S::Ok, S::Error> {
        write_f32(*v, s)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f32, D::Error> {
        read(d).map(|v| v as f32)
    }
}

pub mod ordered_f32 {
    use super::*;
    use ordered_float::OrderedFloat;
    pub fn serialize<S: Serializer>(v: &OrderedFloat<f32>, s: S) -> Result<S::Ok, S::Error> {
        write_f32(v.0, s)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<OrderedFloat<f32>, D::Error> {
        read(d).map(|v| OrderedFloat(v as f32))
    }
}

/// One float in the wire form, for lists.
struct Wire(f64);

impl Serialize for Wire {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        write(self.0, s)
    }
}

/// One f32 in the wire form, for lists.
struct Wire32(f32);

impl Serialize for Wire32 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        write_f32(self.0, s)
    }
}

impl<'de> Deserialize<'de> for Wire {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Wire, D::Error> {
        read(d).map(Wire)
    }
}

/// A list of floats, each as [`f64`] writes it.
pub mod vec_f64 {
    use super::*;
    pub fn serialize<S: Serializer>(v: &[f64], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|&x| Wire(x)))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
        Ok(Vec::<Wire>::deserialize(d)?.into_iter().map(|w| w.0).collect())
    }
}

/// A list of f32s, each as [`f32`] writes it.
pub mod vec_f32 {
    use super::*;
    pub fn serialize<S: Serializer>(v: &[f32], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|&x| Wire32(x)))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f32>, D::Error> {
        Ok(Vec::<Wire>::deserialize(d)?.into_iter().map(|w| w.0 as f32).collect())
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct T(#[serde(with = "super::f32")] f32);

    #[test]
    fn non_finite_values_round_trip_through_json() {
        for v in [0.5f32, -3.0, f32::INFINITY, f32::NEG_INFINITY, f32::MAX] {
            let j = serde_json::to_string(&T(v)).unwrap();
            assert_eq!(serde_json::from_str::<T>(&j).unwrap(), T(v), "{j}");
        }
        assert_eq!(serde_json::to_string(&T(f32::NEG_INFINITY)).unwrap(), "\"-inf\"");
        assert!(serde_json::from_str::<T>("\"nan\"").unwrap().0.is_nan());
        let e = serde_json::from_str::<T>("\"many\"").unwrap_err().to_string();
        assert!(e.contains("'many' is not a number"), "{e}");
        assert!(serde_json::from_str::<T>("null").is_err(), "null is not a float");
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct V(#[serde(with = "super::vec_f32")] Vec<f32>);

    #[test]
    fn lists_with_infinities_round_trip_and_finite_lists_stay_plain() {
        let v = V(vec![1.0, f32::NEG_INFINITY, 2.5]);
        let j = serde_json::to_string(&v).unwrap();
        assert_eq!(j, "[1.0,\"-inf\",2.5]");
        assert_eq!(serde_json::from_str::<V>(&j).unwrap(), v);
        assert_eq!(serde_json::to_string(&V(vec![1.0, 2.0])).unwrap(), "[1.0,2.0]");
        // f32s keep their own shortest form (specs hash their JSON).
        assert_eq!(serde_json::to_string(&V(vec![0.1])).unwrap(), "[0.1]");
        assert_eq!(serde_json::to_string(&T(0.1)).unwrap(), "0.1");
    }
}
