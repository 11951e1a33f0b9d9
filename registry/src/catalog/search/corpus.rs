//! The search's fixed test set: a realistic catalog, generated distractors,
//! and queries with the tool each must find first. The queries were
//! written with the catalog, before the ranking was tuned, and are not to
//! be edited to make a change pass.

use serde_json::json;
use toolmesh_proto::pb;

fn tool(
    name: &str,
    description: &str,
    arguments: serde_json::Value,
    tags: &[&str],
) -> pb::ToolDescriptor {
    pb::ToolDescriptor {
        name: name.into(),
        description: description.into(),
        input_schema_json: json!({"type": "object", "properties": arguments}).to_string(),
        tags: tags.iter().map(|t| (*t).to_owned()).collect(),
        ..Default::default()
    }
}

fn text_arg(description: &str) -> serde_json::Value {
    json!({"type": "string", "description": description})
}

/// Tools a platform team would really run.
pub(crate) fn realistic() -> Vec<pb::ToolDescriptor> {
    vec![
        tool(
            "weather_forecast",
            "Forecast of temperature, rain and wind for a city over the next days",
            json!({"city": text_arg("City name"), "days": {"type": "integer"}}),
            &["weather"],
        ),
        tool(
            "send_email",
            "Send an email message to one or more recipients",
            json!({"to": text_arg("Recipient addresses"), "subject": text_arg("Subject line"), "body": text_arg("Message text")}),
            &["email", "write"],
        ),
        tool(
            "search_email",
            "Search the mailbox for messages matching a query",
            json!({"query": text_arg("Words to look for in messages")}),
            &["email", "read"],
        ),
        tool(
            "create_calendar_event",
            "Create an event in the user's calendar at a date and time",
            json!({"title": text_arg("Event title"), "start": text_arg("Start time"), "attendees": text_arg("People invited")}),
            &["calendar"],
        ),
        tool(
            "list_calendar_events",
            "List the events in the user's calendar between two dates",
            json!({"from": text_arg("First day"), "to": text_arg("Last day")}),
            &["calendar", "read"],
        ),
        tool(
            "github.create_issue",
            "Open a new issue in a GitHub repository",
            json!({"repo": text_arg("owner/name"), "title": text_arg("Issue title"), "body": text_arg("Issue text")}),
            &["github"],
        ),
        tool(
            "github.merge_pull_request",
            "Merge an open pull request on GitHub",
            json!({"repo": text_arg("owner/name"), "number": {"type": "integer"}}),
            &["github"],
        ),
        tool(
            "read_file",
            "Read the contents of a file from the workspace",
            json!({"path": text_arg("File path")}),
            &["files", "read"],
        ),
        tool(
            "write_file",
            "Write text to a file in the workspace, replacing it",
            json!({"path": text_arg("File path"), "content": text_arg("Text to write")}),
            &["files", "write"],
        ),
        tool(
            "sql_query",
            "Run a read-only SQL query against the analytics database",
            json!({"sql": text_arg("The SELECT statement")}),
            &["database"],
        ),
        tool(
            "translate_text",
            "Translate text from one language into another",
            json!({"text": text_arg("Text to translate"), "target_language": text_arg("Language code, e.g. fr")}),
            &["language"],
        ),
        tool(
            "web_search",
            "Search the web and return the top pages with snippets",
            json!({"query": text_arg("Search terms")}),
            &["web"],
        ),
        tool(
            "fetch_url",
            "Download a web page and return its text",
            json!({"url": text_arg("Address of the page")}),
            &["web"],
        ),
        tool(
            "stock_price",
            "Current price of a stock by its ticker symbol",
            json!({"ticker": text_arg("Ticker symbol, e.g. AAPL")}),
            &["finance"],
        ),
        tool(
            "convert_currency",
            "Convert an amount of money between currencies at today's exchange rate",
            json!({"amount": {"type": "number"}, "from": text_arg("Currency code"), "to": text_arg("Currency code")}),
            &["finance"],
        ),
        tool(
            "word_count",
            "Count the words in a text",
            json!({"text": text_arg("The text")}),
            &["text"],
        ),
        tool(
            "summarize_document",
            "Summarize a long document into a few sentences",
            json!({"document": text_arg("The document text")}),
            &["text"],
        ),
        tool(
            "create_invoice",
            "Create an invoice for a customer with line items",
            json!({"customer_id": text_arg("Customer"), "items": {"type": "array"}}),
            &["billing", "write"],
        ),
        tool(
            "refund_payment",
            "Refund a card payment fully or partly",
            json!({"payment_id": text_arg("Payment"), "amount": {"type": "number"}}),
            &["billing", "write"],
        ),
        tool(
            "lookup_customer",
            "Find a customer record by email or phone number",
            json!({"email": text_arg("Customer email"), "phone": text_arg("Phone number")}),
            &["crm", "read"],
        ),
        tool(
            "slack_post_message",
            "Post a message to a Slack channel",
            json!({"channel": text_arg("Channel name"), "text": text_arg("Message")}),
            &["chat"],
        ),
        tool(
            "geocode_address",
            "Turn a street address into latitude and longitude",
            json!({"address": text_arg("Street address")}),
            &["maps"],
        ),
        tool(
            "driving_directions",
            "Driving route and travel time between two places",
            json!({"origin": text_arg("Start"), "destination": text_arg("End")}),
            &["maps"],
        ),
        tool(
            "resize_image",
            "Resize an image to a width and height in pixels",
            json!({"image_url": text_arg("Image"), "width": {"type": "integer"}, "height": {"type": "integer"}}),
            &["images"],
        ),
        tool(
            "transcribe_audio",
            "Transcribe speech in an audio recording to text",
            json!({"audio_url": text_arg("Recording")}),
            &["audio"],
        ),
        tool(
            "restart_service",
            "Restart a service in the Kubernetes cluster",
            json!({"namespace": text_arg("Namespace"), "deployment": text_arg("Deployment name")}),
            &["ops", "write"],
        ),
        tool(
            "query_logs",
            "Search application logs for errors in a time range",
            json!({"service": text_arg("Service name"), "since": text_arg("Start of the range")}),
            &["ops", "read"],
        ),
        tool(
            "page_oncall",
            "Page the on-call engineer about an incident",
            json!({"summary": text_arg("What is wrong"), "severity": text_arg("How bad")}),
            &["ops"],
        ),
        tool(
            "calculator",
            "Evaluate an arithmetic expression",
            json!({"expression": text_arg("e.g. 2 * (3 + 4)")}),
            &["math"],
        ),
        tool(
            "unit_convert",
            "Convert a quantity between units of measure, e.g. miles to kilometers",
            json!({"value": {"type": "number"}, "from_unit": text_arg("Unit"), "to_unit": text_arg("Unit")}),
            &["math"],
        ),
    ]
}

/// Tasks in words and the tool each must find first.
pub(crate) const QUERIES: &[(&str, &str)] = &[
    ("will it rain in Paris tomorrow", "weather_forecast"),
    ("email the team the meeting notes", "send_email"),
    (
        "find the message from Alice about the contract in my inbox",
        "search_email",
    ),
    (
        "schedule a meeting with Bob on Friday at 3pm",
        "create_calendar_event",
    ),
    ("what is on my calendar next week", "list_calendar_events"),
    ("open a bug report in the repository", "github.create_issue"),
    ("merge PR 42", "github.merge_pull_request"),
    ("show me what is in config.yaml", "read_file"),
    ("save this text to notes.txt", "write_file"),
    (
        "how many orders did we get last month, from the analytics database",
        "sql_query",
    ),
    ("say this in French", "translate_text"),
    (
        "look up recent news about Rust on the internet",
        "web_search",
    ),
    ("download the page at https://example.com", "fetch_url"),
    ("what is Apple's share price", "stock_price"),
    ("how much is 100 dollars in euros", "convert_currency"),
    ("how many words does this paragraph have", "word_count"),
    (
        "give me a short summary of this report",
        "summarize_document",
    ),
    ("bill the customer for three licenses", "create_invoice"),
    ("give the customer their money back", "refund_payment"),
    (
        "who is the customer with email jane@example.com",
        "lookup_customer",
    ),
    (
        "tell the #deploys channel on Slack that we are done",
        "slack_post_message",
    ),
    ("coordinates of 10 Downing Street", "geocode_address"),
    (
        "how long does it take to drive from Lyon to Geneva",
        "driving_directions",
    ),
    ("make this picture 200 pixels wide", "resize_image"),
    ("turn this voice memo into text", "transcribe_audio"),
    ("restart the checkout deployment", "restart_service"),
    (
        "any errors in the payments service logs since noon",
        "query_logs",
    ),
    (
        "wake up whoever is on call, the site is down",
        "page_oncall",
    ),
    ("what is 17 times 23", "calculator"),
    ("convert 5 miles to kilometers", "unit_convert"),
];

/// `n` generated tools from another domain (warehouse operations) that
/// share the common words (get, list, update, create, record, status).
pub(crate) fn distractors(n: usize) -> Vec<pb::ToolDescriptor> {
    const VERBS: &[&str] = &[
        "get", "list", "update", "create", "archive", "sync", "count", "check",
    ];
    const NOUNS: &[&str] = &[
        "pallet",
        "shipment",
        "bin",
        "forklift",
        "sensor",
        "dock",
        "carrier",
        "manifest",
        "rack",
        "barcode",
        "supplier",
        "container",
        "zone",
        "shift",
        "picker",
        "crate",
    ];
    (0..n)
        .map(|i| {
            let verb = VERBS[i % VERBS.len()];
            let noun = NOUNS[(i / VERBS.len()) % NOUNS.len()];
            let site = i / (VERBS.len() * NOUNS.len());
            tool(
                &format!("{verb}_{noun}_{site}"),
                &format!("{verb} the {noun} records of warehouse site {site}, with their status and location"),
                json!({"site_id": text_arg("Warehouse site"), format!("{noun}_id"): text_arg(&format!("The {noun}"))}),
                &["warehouse"],
            )
        })
        .collect()
}
