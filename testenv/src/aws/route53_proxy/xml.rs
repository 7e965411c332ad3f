//! The Route53 XML the proxy reads (change batches, record set listings)
//! and writes (errors), by hand: a handful of known elements.

/// A record set as Route53 has it: the identity is (name, type, set id).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rrset {
    /// Lowercase, without the trailing dot.
    pub name: String,
    pub rtype: String,
    pub set_id: Option<String>,
    pub ttl: Option<i64>,
    /// Sorted.
    pub values: Vec<String>,
    pub alias: Option<AliasTarget>,
    /// A weighted set's weight.
    pub weight: Option<i64>,
    /// A failover set's role, `PRIMARY` or `SECONDARY`.
    pub failover: Option<String>,
    pub health_check_id: Option<String>,
}

/// An `AliasTarget`, its DNS name compared as Route53 compares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AliasTarget {
    pub zone_id: String,
    /// Lowercase, without the trailing dot.
    pub dns_name: String,
    pub evaluate_target_health: bool,
}

impl AliasTarget {
    fn parse(block: &str) -> Option<Self> {
        Some(Self {
            zone_id: unescape(first(block, "HostedZoneId")?.trim()),
            dns_name: normalize(first(block, "DNSName")?),
            evaluate_target_health: first(block, "EvaluateTargetHealth").is_some_and(|v| v.trim() == "true"),
        })
    }

    fn to_xml(&self) -> String {
        format!(
            "<AliasTarget><HostedZoneId>{}</HostedZoneId><DNSName>{}.</DNSName><EvaluateTargetHealth>{}</EvaluateTargetHealth></AliasTarget>",
            escape(&self.zone_id),
            escape(&self.dns_name),
            self.evaluate_target_health
        )
    }
}

pub type Key = (String, String, Option<String>);

impl Rrset {
    pub fn key(&self) -> Key {
        (self.name.clone(), self.rtype.clone(), self.set_id.clone())
    }

    /// As a `<ResourceRecordSet>` element.
    pub fn to_xml(&self) -> String {
        let mut out = format!("<ResourceRecordSet><Name>{}.</Name><Type>{}</Type>", escape(&self.name), self.rtype);
        if let Some(id) = &self.set_id {
            out.push_str(&format!("<SetIdentifier>{}</SetIdentifier>", escape(id)));
        }
        if let Some(w) = self.weight {
            out.push_str(&format!("<Weight>{w}</Weight>"));
        }
        if let Some(f) = &self.failover {
            out.push_str(&format!("<Failover>{}</Failover>", escape(f)));
        }
        if let Some(alias) = &self.alias {
            out.push_str(&alias.to_xml());
        }
        if let Some(ttl) = self.ttl {
            out.push_str(&format!("<TTL>{ttl}</TTL>"));
        }
        if let Some(h) = &self.health_check_id {
            out.push_str(&format!("<HealthCheckId>{}</HealthCheckId>", escape(h)));
        }
        if !self.values.is_empty() {
            out.push_str("<ResourceRecords>");
            for v in &self.values {
                out.push_str(&format!("<ResourceRecord><Value>{}</Value></ResourceRecord>", escape(v)));
            }
            out.push_str("</ResourceRecords>");
        }
        out.push_str("</ResourceRecordSet>");
        out
    }
}

/// One change of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub action: String,
    pub rrset: Rrset,
}

/// The texts between `open` and `close`, in order (not nested).
pub fn between<'a>(text: &'a str, open: &str, close: &str) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(open) {
        let after = &rest[i + open.len()..];
        match after.find(close) {
            Some(j) => {
                out.push(&after[..j]);
                rest = &after[j + close.len()..];
            }
            None => break,
        }
    }
    out
}

fn first<'a>(text: &'a str, tag: &str) -> Option<&'a str> {
    between(text, &format!("<{tag}>"), &format!("</{tag}>")).into_iter().next()
}

pub fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"").replace("&apos;", "'").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
}

pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A name as Route53 compares it: lowercase, no trailing dot.
pub fn normalize(name: &str) -> String {
    unescape(name).trim().trim_end_matches('.').to_ascii_lowercase()
}

fn rrset(block: &str) -> Option<Rrset> {
    let mut values: Vec<String> = between(block, "<Value>", "</Value>").into_iter().map(unescape).collect();
    values.sort();
    Some(Rrset {
        name: normalize(first(block, "Name")?),
        rtype: first(block, "Type")?.trim().to_string(),
        set_id: first(block, "SetIdentifier").map(unescape),
        ttl: first(block, "TTL").and_then(|t| t.trim().parse().ok()),
        values,
        alias: first(block, "AliasTarget").and_then(AliasTarget::parse),
        weight: first(block, "Weight").and_then(|w| w.trim().parse().ok()),
        failover: first(block, "Failover").map(|f| f.trim().to_string()),
        health_check_id: first(block, "HealthCheckId").map(|h| unescape(h.trim())),
    })
}

/// The changes of a ChangeResourceRecordSets request body.
pub fn changes(body: &str) -> Option<Vec<Change>> {
    between(body, "<Change>", "</Change>")
        .into_iter()
        .map(|c| Some(Change { action: first(c, "Action")?.trim().to_string(), rrset: rrset(c)? }))
        .collect()
}

/// The record sets of a ListResourceRecordSets answer.
pub fn rrsets(body: &str) -> Vec<Rrset> {
    between(body, "<ResourceRecordSet>", "</ResourceRecordSet>").into_iter().filter_map(rrset).collect()
}

/// A ChangeResourceRecordSets request body.
pub fn change_request(changes: &[Change], comment: &str) -> String {
    let mut out = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ChangeResourceRecordSetsRequest xmlns=\"https://route53.amazonaws.com/doc/2013-04-01/\"><ChangeBatch>",
    );
    out.push_str(&format!("<Comment>{}</Comment><Changes>", escape(comment)));
    for c in changes {
        out.push_str(&format!("<Change><Action>{}</Action>{}</Change>", c.action, c.rrset.to_xml()));
    }
    out.push_str("</Changes></ChangeBatch></ChangeResourceRecordSetsRequest>");
    out
}

/// Route53's answer to a refused batch. Route53 once answered these with
/// an `<InvalidChangeBatch>` root element; today it uses the ordinary
/// `ErrorResponse`, every refused change in one `Message`, bracketed and
/// comma-separated (see aws/aws-sdk-kotlin#1433 and #1435, where the SDKs
/// dropped their customization for the old form).
pub fn invalid_change_batch(messages: &[String]) -> String {
    error_response("InvalidChangeBatch", &format!("[{}]", messages.join(", ")))
}

/// Route53's ordinary error answer.
pub fn error_response(code: &str, message: &str) -> String {
    format!(
        "<?xml version=\"1.0\"?>\n<ErrorResponse xmlns=\"https://route53.amazonaws.com/doc/2013-04-01/\"><Error><Type>Sender</Type><Code>{code}</Code><Message>{}</Message></Error><RequestId>{:032x}</RequestId></ErrorResponse>",
        escape(message),
        rand::random::<u128>()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_batch_round_trips() {
        let body = r#"<ChangeResourceRecordSetsRequest><ChangeBatch><Comment>x</Comment><Changes><Change><Action>CREATE</Action><ResourceRecordSet><Name>A.Example.com.</Name><Type>TXT</Type><TTL>300</TTL><ResourceRecords><ResourceRecord><Value>&quot;heritage=x&quot;</Value></ResourceRecord></ResourceRecords></ResourceRecordSet></Change></Changes></ChangeBatch></ChangeResourceRecordSetsRequest>"#;
        let cs = changes(body).unwrap();
        assert_eq!(cs.len(), 1);
        assert_eq!(cs[0].rrset.name, "a.example.com");
        assert_eq!(cs[0].rrset.values, ["\"heritage=x\""]);
        assert_eq!(changes(&change_request(&cs, "c")).unwrap(), cs);
    }
}
