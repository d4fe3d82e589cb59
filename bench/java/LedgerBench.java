// BookKeeper's own Java client, for bench/live.py: writes one ledger to the sandbox's
// bookies and reads it back, timed, as the reference ledgerctl's live store is compared
// with. Compiled by bench/live.py against the sandbox's jars (scripts/sandbox classpath).
//
// Usage: LedgerBench METADATA_SERVICE_URI write ENTRIES SIZE ENSEMBLE WRITE_QUORUM ACK_QUORUM
//        LedgerBench METADATA_SERVICE_URI read LEDGER_ID RUNS BATCH
// printing one JSON document on stdout, on a line of its own after "LEDGERBENCH ".
//
//   write: a ledger of ENTRIES entries of SIZE bytes (CRC32C digest, the empty password),
//          at most 1,000 adds in flight (asyncAddEntry), closed. {"ledger_id", "seconds"}.
//   read:  RUNS times, entries 0..LAC read with readEntries(first, first + BATCH - 1) (each
//          batch's reads go to the bookies at once: PendingReadOp), every entry's digest
//          verified by the client. {"runs": [{"entries", "bytes", "seconds",
//          "cpu_seconds"}]} (cpu: the whole JVM's, com.sun.management).

import java.lang.management.ManagementFactory;
import java.util.Arrays;
import java.util.Enumeration;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.bookkeeper.client.BKException;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.LedgerEntry;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.conf.ClientConfiguration;

public final class LedgerBench {
    private static final byte[] PASSWORD = new byte[0];

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: LedgerBench METADATA_SERVICE_URI write|read ...");
            System.exit(2);
        }
        ClientConfiguration conf = new ClientConfiguration();
        conf.setMetadataServiceUri(args[0]);
        conf.setAddEntryTimeout(60);
        conf.setReadEntryTimeout(60);
        BookKeeper bk = new BookKeeper(conf);
        try {
            if (args[1].equals("write")) {
                write(bk, Integer.parseInt(args[2]), Integer.parseInt(args[3]),
                      Integer.parseInt(args[4]), Integer.parseInt(args[5]),
                      Integer.parseInt(args[6]));
            } else {
                read(bk, Long.parseLong(args[2]), Integer.parseInt(args[3]),
                     Integer.parseInt(args[4]));
            }
        } finally {
            bk.close();
        }
    }

    private static void write(BookKeeper bk, int entries, int size, int ensemble, int wq, int aq)
            throws Exception {
        long start = System.nanoTime();
        LedgerHandle lh = bk.createLedger(ensemble, wq, aq, BookKeeper.DigestType.CRC32C, PASSWORD);
        Semaphore inFlight = new Semaphore(1000);
        AtomicReference<Integer> failed = new AtomicReference<>(null);
        byte[] payload = new byte[size];
        for (int i = 0; i < entries; i++) {
            Arrays.fill(payload, (byte) (i & 0x7f));
            inFlight.acquire();
            lh.asyncAddEntry(payload.clone(), (rc, handle, entryId, ctx) -> {
                if (rc != BKException.Code.OK) {
                    failed.compareAndSet(null, rc);
                }
                inFlight.release();
            }, null);
        }
        inFlight.acquire(1000);
        if (failed.get() != null) {
            throw BKException.create(failed.get());
        }
        lh.close();
        double seconds = (System.nanoTime() - start) / 1e9;
        System.out.println("LEDGERBENCH {\"ledger_id\": " + lh.getId() + ", \"seconds\": " + seconds + "}");
    }

    private static void read(BookKeeper bk, long ledgerId, int runs, int batch) throws Exception {
        com.sun.management.OperatingSystemMXBean os =
            (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        StringBuilder out = new StringBuilder("LEDGERBENCH {\"runs\": [");
        for (int run = 0; run < runs; run++) {
            LedgerHandle lh = bk.openLedgerNoRecovery(ledgerId, BookKeeper.DigestType.CRC32C,
                                                     PASSWORD);
            long last = lh.getLastAddConfirmed();
            long cpu = os.getProcessCpuTime();
            long start = System.nanoTime();
            long count = 0, bytes = 0;
            for (long first = 0; first <= last; first += batch) {
                Enumeration<LedgerEntry> got = lh.readEntries(first,
                                                              Math.min(last, first + batch - 1));
                while (got.hasMoreElements()) {
                    LedgerEntry e = got.nextElement();
                    bytes += e.getLength();
                    count++;
                }
            }
            double seconds = (System.nanoTime() - start) / 1e9;
            double cpuSeconds = (os.getProcessCpuTime() - cpu) / 1e9;
            lh.close();
            out.append(run == 0 ? "" : ", ").append("{\"entries\": ").append(count)
               .append(", \"bytes\": ").append(bytes).append(", \"seconds\": ").append(seconds)
               .append(", \"cpu_seconds\": ").append(cpuSeconds).append("}");
        }
        System.out.println(out.append("]}"));
    }
}
