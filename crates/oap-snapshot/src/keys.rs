//! Keys and signatures, in minisign's formats so that the `minisign` tool
//! can make and check them too: a public key is the base64 line of a
//! `.pub` file (`RW...`), a secret key the whole `.key` file, and a
//! signature the whole `.minisig` file (untrusted comment, signature,
//! trusted comment, global signature).
//!
//! A board may trust several keys (a key being rotated out beside its
//! successor); the signature's key id picks the one to check with.

use std::io::Cursor;
use std::path::Path;

use minisign::{KeyPair, PublicKey, SecretKey, SecretKeyBox, SignatureBox};

use crate::error::SnapshotError;

/// Largest key or signature file read.
const MAX_KEY_FILE_BYTES: u64 = 16 << 10;

/// A key id as minisign prints it: the 8-byte key number, little-endian,
/// in upper-case hex.
pub fn key_id(keynum: &[u8]) -> String {
    let mut bytes = [0u8; 8];
    for (slot, byte) in bytes.iter_mut().zip(keynum) {
        *slot = *byte;
    }
    format!("{:016X}", u64::from_le_bytes(bytes))
}

/// The public keys a board accepts snapshots from.
#[derive(Clone)]
pub struct TrustedKeys {
    keys: Vec<PublicKey>,
}

impl std::fmt::Debug for TrustedKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.keys.iter().map(|k| key_id(k.keynum())))
            .finish()
    }
}

impl TrustedKeys {
    /// Parses each entry as a minisign public key: the base64 line, or a
    /// whole `.pub` file's text (its `untrusted comment:` line is skipped).
    /// An entry that is not a key is an error naming its position.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<TrustedKeys, SnapshotError> {
        if entries.is_empty() {
            return Err(SnapshotError::Key(
                "no public key: a snapshot can only be trusted through one".into(),
            ));
        }
        let mut keys = Vec::with_capacity(entries.len());
        for (position, entry) in entries.iter().enumerate() {
            let line = entry
                .as_ref()
                .lines()
                .map(str::trim)
                .find(|line| !line.is_empty() && !line.starts_with("untrusted comment:"))
                .unwrap_or("");
            let key = PublicKey::from_base64(line).map_err(|err| {
                SnapshotError::Key(format!(
                    "public key {} is not a minisign public key: {err}",
                    position + 1
                ))
            })?;
            keys.push(key);
        }
        Ok(TrustedKeys { keys })
    }

    /// Like [`TrustedKeys::parse`], for command-line arguments that may be
    /// keys or files, with one rule: an argument that is a minisign public
    /// key (the `RW...` line or a `.pub` file's text) is taken as one;
    /// anything else names a `.pub` file, which is read (capped). So a key
    /// never opens a file, and a file name never has to look unlike a key.
    pub fn from_keys_or_files<S: AsRef<str>>(
        arguments: &[S],
    ) -> Result<TrustedKeys, SnapshotError> {
        let mut entries = Vec::with_capacity(arguments.len());
        for argument in arguments {
            let argument = argument.as_ref();
            if TrustedKeys::parse(&[argument]).is_ok() {
                entries.push(argument.to_owned());
                continue;
            }
            let path = Path::new(argument);
            let text = oap_store::read_capped(path, MAX_KEY_FILE_BYTES).map_err(|err| {
                SnapshotError::Key(format!(
                    "{argument:?} is neither a minisign public key nor a readable .pub file: {err}"
                ))
            })?;
            entries.push(String::from_utf8_lossy(&text).into_owned());
        }
        TrustedKeys::parse(&entries)
    }

    /// How many keys are trusted.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether none is (never, once parsed).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Checks `signature` (a `.minisig` file's text) over `data` and
    /// returns the signer's key id. Legacy (not pre-hashed) signatures and
    /// signatures without a trusted comment are refused: minisign has made
    /// neither by default for years, and the trusted comment is what the
    /// signer vouches for beside the data.
    pub fn verify(&self, data: &[u8], signature: &str) -> Result<String, SnapshotError> {
        let signature = SignatureBox::from_string(signature)
            .map_err(|err| SnapshotError::SignatureFormat(err.to_string()))?;
        let key_id_of_signature = key_id(signature.keynum());
        if signature.trusted_comment().is_err() {
            return Err(SnapshotError::BadSignature {
                key_id: key_id_of_signature,
                reason: "the signature has no trusted comment".into(),
            });
        }
        let key = self
            .keys
            .iter()
            .find(|key| key.keynum() == signature.keynum())
            .ok_or_else(|| SnapshotError::UnknownKey {
                key_id: key_id_of_signature.clone(),
                trusted: self.keys.len(),
            })?;
        minisign::verify(key, &signature, Cursor::new(data), true, false, false).map_err(
            |err| SnapshotError::BadSignature {
                key_id: key_id_of_signature.clone(),
                reason: err.to_string(),
            },
        )?;
        Ok(key_id_of_signature)
    }
}

/// The secret key a snapshot is signed with, and its public half.
pub struct SigningKey {
    secret: SecretKey,
    public: PublicKey,
}

impl SigningKey {
    /// A new key pair.
    pub fn generate() -> Result<SigningKey, SnapshotError> {
        let pair = KeyPair::generate_unencrypted_keypair()
            .map_err(|err| SnapshotError::Key(format!("cannot make a key pair: {err}")))?;
        Ok(SigningKey {
            secret: pair.sk,
            public: pair.pk,
        })
    }

    /// Reads a minisign secret key file (`minisign -G` writes one);
    /// `password` decrypts one made with a password (`None`: the key must
    /// have been made without, as `minisign -G -W` does).
    pub fn from_file(path: &Path, password: Option<String>) -> Result<SigningKey, SnapshotError> {
        let bytes = oap_store::read_capped(path, MAX_KEY_FILE_BYTES)?;
        let text = String::from_utf8(bytes).map_err(|_| {
            SnapshotError::Key(format!(
                "{}: not a minisign secret key (not text)",
                path.display()
            ))
        })?;
        let boxed = SecretKeyBox::from_string(&text)
            .map_err(|err| SnapshotError::Key(format!("{}: {err}", path.display())))?;
        let secret = match password {
            Some(password) => boxed.into_secret_key(Some(password)),
            None => boxed.into_unencrypted_secret_key(),
        }
        .map_err(|err| {
            SnapshotError::Key(format!(
                "{}: not a usable minisign secret key: {err}",
                path.display()
            ))
        })?;
        let public = PublicKey::from_secret_key(&secret)
            .map_err(|err| SnapshotError::Key(format!("{}: {err}", path.display())))?;
        Ok(SigningKey { secret, public })
    }

    /// The secret key file's text (unencrypted: keep it off the boards).
    pub fn secret_file_text(&self) -> Result<String, SnapshotError> {
        self.secret
            .to_box(Some("oapd snapshot signing key"))
            .map(|boxed| boxed.into_string())
            .map_err(|err| SnapshotError::Key(err.to_string()))
    }

    /// The public key file's text (`untrusted comment:` line and key line).
    pub fn public_file_text(&self) -> Result<String, SnapshotError> {
        self.public
            .to_box()
            .map(|boxed| boxed.into_string())
            .map_err(|err| SnapshotError::Key(err.to_string()))
    }

    /// The public key's base64 line: what a board's `snapshots.public_keys`
    /// lists.
    pub fn public_key(&self) -> String {
        self.public.to_base64()
    }

    /// This key's id, as minisign prints it.
    pub fn key_id(&self) -> String {
        key_id(self.public.keynum())
    }

    /// Signs `data`; the result is a `.minisig` file's text.
    pub fn sign(&self, data: &[u8], trusted_comment: &str) -> Result<String, SnapshotError> {
        minisign::sign(
            Some(&self.public),
            &self.secret,
            Cursor::new(data),
            Some(trusted_comment),
            Some("signature of an oapd snapshot listing"),
        )
        .map(|boxed| boxed.into_string())
        .map_err(|err| SnapshotError::Key(format!("cannot sign: {err}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_with_its_key_among_several_and_not_with_another() {
        let signer = SigningKey::generate().unwrap();
        let other = SigningKey::generate().unwrap();
        let signature = signer.sign(b"listing", "version:1").unwrap();
        let both = TrustedKeys::parse(&[other.public_key(), signer.public_key()]).unwrap();
        assert_eq!(
            both.verify(b"listing", &signature).unwrap(),
            signer.key_id()
        );
        let err = both.verify(b"listinG", &signature).unwrap_err();
        assert!(matches!(err, SnapshotError::BadSignature { .. }), "{err}");
        let only_other = TrustedKeys::parse(&[other.public_key()]).unwrap();
        let err = only_other.verify(b"listing", &signature).unwrap_err();
        assert!(
            matches!(&err, SnapshotError::UnknownKey { key_id, trusted: 1 } if *key_id == signer.key_id()),
            "{err}"
        );
    }

    #[test]
    fn key_files_round_trip_and_a_pub_file_text_is_accepted() {
        let signer = SigningKey::generate().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("snapshot.key");
        std::fs::write(&path, signer.secret_file_text().unwrap()).unwrap();
        let loaded = SigningKey::from_file(&path, None).unwrap();
        assert_eq!(loaded.public_key(), signer.public_key());
        let signature = loaded.sign(b"data", "c").unwrap();
        let keys = TrustedKeys::parse(&[signer.public_file_text().unwrap()]).unwrap();
        assert!(keys.verify(b"data", &signature).is_ok());
    }

    #[test]
    fn an_argument_is_a_key_when_it_parses_as_one_and_a_file_otherwise() {
        let signer = SigningKey::generate().unwrap();
        let signature = signer.sign(b"data", "c").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let pub_file = dir.path().join("snapshot.pub");
        std::fs::write(&pub_file, signer.public_file_text().unwrap()).unwrap();
        // A file whose name starts like a key is still read as a file.
        let rw_named = dir.path().join("RWkeys.pub");
        std::fs::write(&rw_named, signer.public_file_text().unwrap()).unwrap();
        for argument in [
            signer.public_key(),
            pub_file.display().to_string(),
            rw_named.display().to_string(),
        ] {
            let keys = TrustedKeys::from_keys_or_files(&[&argument]).unwrap();
            assert_eq!(keys.verify(b"data", &signature).unwrap(), signer.key_id());
        }
        let missing = dir.path().join("absent.pub").display().to_string();
        let err = TrustedKeys::from_keys_or_files(&[&missing])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("neither a minisign public key nor a readable .pub file"),
            "{err}"
        );
    }

    #[test]
    fn garbage_keys_and_signatures_are_named() {
        let err = TrustedKeys::parse(&["RWQ-not-base64!"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("public key 1"), "{err}");
        let err = TrustedKeys::parse::<&str>(&[]).unwrap_err().to_string();
        assert!(err.contains("no public key"), "{err}");
        let signer = SigningKey::generate().unwrap();
        let keys = TrustedKeys::parse(&[signer.public_key()]).unwrap();
        let err = keys.verify(b"data", "not a signature").unwrap_err();
        assert!(matches!(err, SnapshotError::SignatureFormat(_)), "{err}");
    }
}
