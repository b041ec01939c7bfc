import COpenSSL
import Glibc

/// When a PEM certificate stops being valid (`notAfter`), for the doctor's look at the
/// ID-token keys and the App Store roots. nil for a PEM that holds no certificate.
enum CertificateExpiry {
    static func notAfter(pem: String) -> Timestamp? {
        let bytes = Array(pem.utf8)
        return withMemoryBIO(bytes) { bio -> Timestamp? in
            guard let cert = PEM_read_bio_X509(bio, nil, nil, nil) else { return nil }
            defer { X509_free(cert) }
            return notAfter(cert)
        }
    }

    static func notAfter(der: [UInt8]) -> Timestamp? {
        der.withUnsafeBufferPointer { buffer -> Timestamp? in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            guard let cert = d2i_X509(nil, &cursor, buffer.count) else { return nil }
            defer { X509_free(cert) }
            return notAfter(cert)
        }
    }

    /// OpenSSL's own difference between now and `notAfter` (no calendar arithmetic here).
    private static func notAfter(_ cert: OpaquePointer) -> Timestamp? {
        guard let time = X509_get0_notAfter(cert) else { return nil }
        var days: Int32 = 0
        var seconds: Int32 = 0
        let now = time_t(Glibc.time(nil))
        guard ASN1_TIME_diff(&days, &seconds, nil, time) == 1 else { return nil }
        return Timestamp(secondsSinceEpoch: Int64(now) + Int64(days) * 86_400 + Int64(seconds))
    }
}
