//! ONNX Einsum equations: which dims of the operands and of the output share a label.
//!
//! Shared by shape inference (output rank and dims from the operands' possibly symbolic shapes)
//! and the reference executor (the contraction itself), so both read an equation one way.

/// An Einsum equation with each operand dim (and each output dim) mapped to a label id.
/// Letters get ids in order of first appearance; the dims an ellipsis stands for get ids of
/// their own, aligned from the right across operands as numpy broadcasting aligns them.
#[derive(Clone, Debug, PartialEq)]
pub struct EinsumSpec {
    /// Per operand, the label of each of its dims; `None` for an operand whose rank is unknown
    /// and that holds an ellipsis (its dims cannot be placed).
    pub operands: Vec<Option<Vec<usize>>>,
    /// The output's labels; `None` when they depend on an ellipsis of unknown rank.
    pub output: Option<Vec<usize>>,
    /// Labels in all: ids below `first_ellipsis` are letters, the rest ellipsis dims.
    pub labels: usize,
    /// The letter of each letter label, by id.
    pub letters: Vec<char>,
    pub first_ellipsis: usize,
}

impl EinsumSpec {
    /// Whether `label` stands for a dim an ellipsis covers.
    pub fn is_ellipsis(&self, label: usize) -> bool {
        label >= self.first_ellipsis
    }

    /// How messages name a label: its letter, or its place among the ellipsis dims.
    pub fn name(&self, label: usize) -> String {
        match self.letters.get(label) {
            Some(c) => format!("'{c}'"),
            None => format!("ellipsis dim {}", label - self.first_ellipsis),
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Item {
    Letter(u8),
    Ellipsis,
}

/// The items of one term ("ab...c"); at most one ellipsis, letters only otherwise.
fn term(s: &str) -> Result<Vec<Item>, String> {
    let mut items = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("...") {
            if items.contains(&Item::Ellipsis) {
                return Err(format!("term '{s}' holds more than one ellipsis"));
            }
            items.push(Item::Ellipsis);
            rest = r;
            continue;
        }
        let c = rest.as_bytes()[0];
        if !c.is_ascii_alphabetic() {
            return Err(format!(
                "term '{s}' holds '{}': labels are letters, or one '...'",
                rest.chars().next().unwrap_or('?')
            ));
        }
        items.push(Item::Letter(c));
        rest = &rest[1..];
    }
    Ok(items)
}

/// Maps `equation` (ONNX's Einsum attribute, numpy's syntax: explicit with `->` or implicit)
/// onto operands of the given ranks (`None`: unknown). Implicit mode outputs the ellipsis dims,
/// then the letters that appear once in the inputs, in ASCII order (numpy's rule). Errors
/// name what the equation gets wrong: a term's letter count against its operand's rank, a
/// repeated or unknown output letter, a count of terms other than the operands'.
pub fn parse(equation: &str, ranks: &[Option<usize>]) -> Result<EinsumSpec, String> {
    let eq: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let terms: Vec<Vec<Item>> = lhs.split(',').map(term).collect::<Result<_, _>>()?;
    if terms.len() != ranks.len() {
        return Err(format!("equation '{equation}' has {} input terms for {} inputs", terms.len(), ranks.len()));
    }
    let mut ids: Vec<u8> = Vec::new();
    let mut id = |c: u8| match ids.iter().position(|&x| x == c) {
        Some(i) => i,
        None => {
            ids.push(c);
            ids.len() - 1
        }
    };
    let letters: Vec<Vec<usize>> = terms
        .iter()
        .map(|t| t.iter().filter_map(|i| if let Item::Letter(c) = i { Some(id(*c)) } else { None }).collect())
        .collect();
    let out_items = rhs.map(term).transpose()?;
    if let Some(items) = &out_items {
        for (k, it) in items.iter().enumerate() {
            if let Item::Letter(c) = it {
                if !ids.contains(c) {
                    return Err(format!("output label '{}' appears in no input", *c as char));
                }
                if items[..k].contains(it) {
                    return Err(format!("output label '{}' appears twice", *c as char));
                }
            }
        }
    }
    let first_ellipsis = ids.len();
    // Each operand's ellipsis length; the longest sets how many ellipsis labels there are.
    let mut spans: Vec<Option<usize>> = Vec::with_capacity(terms.len());
    for (k, (t, r)) in terms.iter().zip(ranks).enumerate() {
        let n = letters[k].len();
        let has = t.contains(&Item::Ellipsis);
        spans.push(match (r, has) {
            (Some(r), false) if *r != n => {
                return Err(format!("term {k} names {n} dims but input {k} has rank {r}"));
            }
            (Some(r), true) if *r < n => {
                return Err(format!("term {k} names {n} dims besides '...' but input {k} has rank {r}"));
            }
            (Some(r), true) => Some(r - n),
            (_, false) => Some(0),
            (None, true) => None,
        });
    }
    let ellipsis: Option<usize> = spans.iter().try_fold(0, |m, s| s.map(|s| m.max(s)));
    let operands = terms
        .iter()
        .zip(&spans)
        .map(|(t, span)| {
            // Placed only where the ellipsis labels are known: this operand's span and, if it
            // holds an ellipsis, the longest span (its labels end there).
            let span = (*span)?;
            let mut v = Vec::new();
            for item in t {
                match item {
                    Item::Letter(c) => v.push(ids.iter().position(|x| x == c)?),
                    Item::Ellipsis => {
                        let e = ellipsis?;
                        v.extend((e - span..e).map(|j| first_ellipsis + j));
                    }
                }
            }
            Some(v)
        })
        .collect();
    let any_ellipsis = terms.iter().any(|t| t.contains(&Item::Ellipsis));
    let out_items = out_items.unwrap_or_else(|| {
        // Implicit: the ellipsis, then the letters used once, in ASCII order.
        let mut once: Vec<u8> = ids
            .iter()
            .copied()
            .filter(|c| terms.iter().flatten().filter(|i| **i == Item::Letter(*c)).count() == 1)
            .collect();
        once.sort_unstable();
        any_ellipsis.then_some(Item::Ellipsis).into_iter().chain(once.into_iter().map(Item::Letter)).collect()
    });
    let output = match (out_items.contains(&Item::Ellipsis), ellipsis) {
        (true, None) => None,
        (_, e) => Some(
            out_items
                .iter()
                .flat_map(|it| match it {
                    Item::Letter(c) => vec![ids.iter().position(|x| x == c).expect("checked above")],
                    Item::Ellipsis => (0..e.unwrap_or(0)).map(|j| first_ellipsis + j).collect(),
                })
                .collect(),
        ),
    };
    Ok(EinsumSpec {
        operands,
        output,
        labels: first_ellipsis + ellipsis.unwrap_or(0),
        letters: ids.iter().map(|&c| c as char).collect(),
        first_ellipsis,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_and_implicit_outputs() {
        let s = parse("bij,bjk->bik", &[Some(3), Some(3)]).unwrap();
        assert_eq!(s.operands, vec![Some(vec![0, 1, 2]), Some(vec![0, 2, 3])]);
        assert_eq!(s.output, Some(vec![0, 1, 3]));
        // Implicit: letters used once, in ASCII order (upper case first).
        let s = parse("bA,Ac", &[Some(2), Some(2)]).unwrap();
        assert_eq!(s.output, Some(vec![0, 2]));
        let s = parse("ii", &[Some(2)]).unwrap();
        assert_eq!(s.output, Some(vec![]));
    }

    #[test]
    fn ellipsis_dims_align_from_the_right() {
        let s = parse("...ij,...jk", &[Some(4), Some(3)]).unwrap();
        // Two ellipsis labels (4 and 5); the second operand holds only the last.
        assert_eq!(s.operands, vec![Some(vec![3, 4, 0, 1]), Some(vec![4, 1, 2])]);
        assert_eq!(s.output, Some(vec![3, 4, 0, 2]));
        // An unknown rank leaves the output unknown only where the ellipsis reaches it.
        let s = parse("...ij,jk->ik", &[None, Some(2)]).unwrap();
        assert_eq!((s.operands[0].clone(), s.output), (None, Some(vec![0, 2])));
        assert_eq!(parse("...ij,jk->...ik", &[None, Some(2)]).unwrap().output, None);
        // Another operand's ellipsis labels end where the unknown one's do: it is unplaced too.
        let s = parse("...ij,...jk->ik", &[None, Some(3)]).unwrap();
        assert_eq!((s.operands, s.output), (vec![None, None], Some(vec![0, 2])));
    }

    #[test]
    fn malformed_equations_say_why() {
        let err = |eq: &str, ranks: &[Option<usize>]| parse(eq, ranks).unwrap_err();
        assert!(err("ij,jk->ik", &[Some(2)]).contains("2 input terms for 1 inputs"));
        assert!(err("ij->k", &[Some(2)]).contains("'k' appears in no input"));
        assert!(err("ij->ii", &[Some(2)]).contains("'i' appears twice"));
        assert!(err("ijk->i", &[Some(2)]).contains("names 3 dims but input 0 has rank 2"));
        assert!(err("i1->i", &[Some(2)]).contains("labels are letters"));
    }
}
