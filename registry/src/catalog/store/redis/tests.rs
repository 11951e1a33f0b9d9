use super::records::instance;
use super::*;

#[test]
fn an_address_keeps_the_endpoint_and_the_key_apart() {
    let key = CallKey::from_bytes(&[9; 32]).expect("32 bytes");
    let stored = stored_address("http://10.0.0.7:50061", Some(&key));
    assert_eq!(endpoint_of(&stored), "http://10.0.0.7:50061");
    let read = instance("i".into(), &stored);
    assert_eq!(read.endpoint, "http://10.0.0.7:50061");
    assert_eq!(read.execute_key, Some(key));

    let plain = stored_address("http://10.0.0.7:50061", None);
    assert_eq!(plain, "http://10.0.0.7:50061");
    assert_eq!(instance("i".into(), &plain).execute_key, None);
    let garbled = instance("i".into(), "http://10.0.0.7:50061 not-base64!");
    assert_eq!(
        (garbled.endpoint.as_str(), garbled.execute_key),
        ("http://10.0.0.7:50061", None)
    );
}
