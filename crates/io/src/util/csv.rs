//! CSV as spreadsheets and pandas write it (RFC 4180): a UTF-8 byte-order mark is dropped,
//! fields may be quoted (`"a, b"`, `"say ""hi"""`, line breaks inside quotes), lines end in LF or
//! CRLF, and spaces around an unquoted field are not part of it.

use std::path::Path;

use crate::error::{Error, IoContext, Result};

/// A CSV file's header and records (each record as many fields as it has; blank lines skipped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    pub header: Vec<String>,
    /// (line number of the record's start, its fields).
    pub rows: Vec<(usize, Vec<String>)>,
}

impl Table {
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).at(path)?;
        Self::parse(&text).map_err(|msg| Error::format(path, msg))
    }

    /// Parses CSV text; an unterminated quote is an error naming its line.
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut recs = records(text)?.into_iter().filter(|(_, r)| !(r.len() == 1 && r[0].is_empty()));
        let header = recs.next().map(|(_, h)| h).ok_or("the file is empty (it needs a header line)")?;
        Ok(Self { header, rows: recs.collect() })
    }

    /// The index of column `name`, or an error listing the columns.
    pub fn column(&self, name: &str) -> std::result::Result<usize, String> {
        self.header.iter().position(|h| h == name).ok_or_else(|| {
            let shown: Vec<String> = self.header.iter().map(|h| format!("'{h}'")).collect();
            format!("no column '{name}' (columns: {})", shown.join(", "))
        })
    }
}

/// The records of `text` with the line each starts on (1-based).
fn records(text: &str) -> std::result::Result<Vec<(usize, Vec<String>)>, String> {
    let mut out = Vec::new();
    let (mut record, mut field) = (Vec::new(), Field::default());
    let (mut line, mut start) = (1, 1);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if field.in_quotes {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.text.push('"');
                }
                '"' => {
                    field.in_quotes = false;
                    field.closed_at = field.text.len();
                }
                c => {
                    line += usize::from(c == '\n');
                    field.text.push(c);
                }
            }
            continue;
        }
        match c {
            ',' => record.push(std::mem::take(&mut field).finish()),
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' => {
                record.push(std::mem::take(&mut field).finish());
                out.push((start, std::mem::take(&mut record)));
                line += 1;
                start = line;
            }
            '"' if field.text.trim().is_empty() && !field.quoted => {
                field = Field { in_quotes: true, quoted: true, ..Field::default() };
            }
            c => field.text.push(c),
        }
    }
    if field.in_quotes {
        return Err(format!("line {start}: a quoted field is not closed"));
    }
    if !field.text.is_empty() || field.quoted || !record.is_empty() {
        record.push(field.finish());
        out.push((start, record));
    }
    Ok(out)
}

#[derive(Default)]
struct Field {
    text: String,
    quoted: bool,
    in_quotes: bool,
    /// Where the closing quote was (in `text`).
    closed_at: usize,
}

impl Field {
    /// The field's value: quoted text as it is (spaces after the closing quote dropped);
    /// unquoted text without surrounding spaces.
    fn finish(mut self) -> String {
        if !self.quoted {
            return self.text.trim().to_string();
        }
        if self.text[self.closed_at..].trim().is_empty() {
            self.text.truncate(self.closed_at);
        }
        self.text
    }
}

/// Whether a label cell marks membership: `Yes`, `1` or `true` (any case).
pub fn truthy(s: &str) -> bool {
    matches!(s.trim().to_ascii_lowercase().as_str(), "yes" | "1" | "true")
}

/// Gene id → class from a CSV with a header: the class is the index of the one column of
/// `class_columns` marked (see [`truthy`]); rows with none are skipped. A row with two classes,
/// a class column named twice and a gene listed with two different classes are errors naming
/// the line; a gene listed twice with the same class counts once.
pub fn read_gene_classes(p: &Path, id_column: &str, class_columns: &[String]) -> Result<Vec<(String, usize)>> {
    let table = Table::read(p)?;
    let col = |name: &str| table.column(name).map_err(|m| Error::format(p, m));
    let id = col(id_column)?;
    if let Some((i, c)) = class_columns.iter().enumerate().find(|(i, c)| class_columns[..*i].contains(*c)) {
        return Err(Error::Usage(format!("class column '{c}' is named twice (as class {} and an earlier one)", i + 1)));
    }
    let classes = class_columns.iter().map(|c| col(c)).collect::<Result<Vec<_>>>()?;
    let mut out: Vec<(String, usize)> = Vec::new();
    let mut seen: std::collections::HashMap<String, (usize, usize)> = Default::default();
    for (line, f) in &table.rows {
        let get = |i: usize| f.get(i).map(String::as_str).unwrap_or_default();
        let marked: Vec<usize> = (0..classes.len()).filter(|&c| truthy(get(classes[c]))).collect();
        let class = match marked[..] {
            [] => continue,
            [c] => c,
            _ => return Err(Error::format(p, format!("line {line}: more than one class column set"))),
        };
        let gene = get(id).to_string();
        if gene.is_empty() {
            return Err(Error::format(p, format!("line {line}: no gene id in column '{id_column}'")));
        }
        match seen.get(&gene) {
            Some(&(c, _)) if c == class => {}
            Some(&(c, first)) => {
                return Err(Error::format(
                    p,
                    format!(
                        "line {line}: gene '{gene}' is '{}' here but '{}' on line {first}; each gene needs one label",
                        class_columns[class], class_columns[c]
                    ),
                ))
            }
            None => {
                seen.insert(gene.clone(), (class, *line));
                out.push((gene, class));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(text: &str) -> Vec<Vec<String>> {
        let t = Table::parse(text).unwrap();
        std::iter::once(t.header).chain(t.rows.into_iter().map(|(_, r)| r)).collect()
    }

    #[test]
    fn quotes_bom_crlf_and_spaces_are_read_as_spreadsheets_write_them() {
        let text = "\u{feff}ensembl_id, \"a,b\" ,c\r\n\"G1\",\"say \"\"hi\"\"\",\"two\nlines\"\r\n\nG2 ,, \"\"\n";
        assert_eq!(
            rows(text),
            vec![
                vec!["ensembl_id".to_string(), "a,b".into(), "c".into()],
                vec!["G1".into(), "say \"hi\"".into(), "two\nlines".into()],
                vec!["G2".into(), "".into(), "".into()],
            ]
        );
        let t = Table::parse(text).unwrap();
        assert_eq!(t.rows[1].0, 5, "G2 starts on line 5");
        assert!(Table::parse("a,b\n\"open,1\n").unwrap_err().contains("line 2: a quoted field is not closed"));
        assert!(Table::parse("").unwrap_err().contains("empty"));
        assert_eq!(Table::parse("x\n").unwrap().column("y").unwrap_err(), "no column 'y' (columns: 'x')");
    }

    #[test]
    fn gene_classes_refuse_conflicting_and_repeated_labels() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("labels.csv");
        let classes = ["pos".to_string(), "neg".to_string()];
        std::fs::write(&p, "\u{feff}\"ensembl_id\",\"pos\",\"neg\"\nG1,Yes,\nG2,,1\nG1,TRUE,\nG3,,\n").unwrap();
        assert_eq!(
            read_gene_classes(&p, "ensembl_id", &classes).unwrap(),
            vec![("G1".to_string(), 0), ("G2".to_string(), 1)]
        );
        std::fs::write(&p, "ensembl_id,pos,neg\nG1,Yes,\nG2,,1\nG1,,yes\n").unwrap();
        let e = read_gene_classes(&p, "ensembl_id", &classes).unwrap_err().to_string();
        assert!(e.contains("line 4: gene 'G1' is 'neg' here but 'pos' on line 2"), "{e}");
        let e = read_gene_classes(&p, "ensembl_id", &["pos".into(), "pos".into()]).unwrap_err().to_string();
        assert!(e.contains("class column 'pos' is named twice"), "{e}");
        let e = read_gene_classes(&p, "id", &classes).unwrap_err().to_string();
        assert!(e.contains("no column 'id'") && e.contains("labels.csv"), "{e}");
    }
}
