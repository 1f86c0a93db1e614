// Prints a jBCrypt ($2a$) hash of its argument: the API key seeded into the real server's
// Redis by scripts/test-realserver.sh (jBCrypt accepts only $2a$ hashes). Run as a
// single-file source program with jbcrypt on the class path (from ~/.m2, the server's build).
public class BcryptHash {
    public static void main(String[] args) {
        System.out.println(org.mindrot.jbcrypt.BCrypt.hashpw(args[0], org.mindrot.jbcrypt.BCrypt.gensalt(10)));
    }
}
