// Rewrites a stopped ZooKeeper server's database offline, with ZooKeeper's own classes, so that
// it comes back diverged from its quorum (zkgate_localzk::ServerSet::diverge; the symptom of
// ZOOKEEPER-5010). It loads the newest snapshot and the transaction logs after it, applies the
// edits to the tree and saves a snapshot at the same last processed zxid: started again, the
// server loads that snapshot, finds no logged transaction after it, reports the same zxid to
// its leader and is synced with a DIFF (the transactions it missed, if any) that leaves the
// edits in place.
//
// Usage: ZkDiverge DATA_DIR [--delete PATH | --ghost PATH SESSION_ID]...
//   --delete PATH           delete PATH and everything under it
//   --ghost PATH SESSION_ID create the ephemeral PATH (empty, world-readable) owned by the session
// The data directory is the server's dataDir (= its dataLogDir), holding version-2/.

import java.io.File;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.common.PathUtils;
import org.apache.zookeeper.server.DataNode;
import org.apache.zookeeper.server.DataTree;
import org.apache.zookeeper.server.persistence.FileTxnSnapLog;

public class ZkDiverge {
    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            throw new IllegalArgumentException("usage: ZkDiverge DATA_DIR [--delete PATH | --ghost PATH SESSION_ID]...");
        }
        File dataDir = new File(args[0]);
        if (!new File(dataDir, "version-2").isDirectory()) {
            throw new IllegalArgumentException(dataDir + " holds no version-2 database");
        }
        FileTxnSnapLog snapLog = new FileTxnSnapLog(dataDir, dataDir);
        DataTree tree = new DataTree();
        ConcurrentHashMap<Long, Integer> sessions = new ConcurrentHashMap<>();
        snapLog.restore(tree, sessions, (header, txn, digest) -> { });
        long zxid = tree.lastProcessedZxid;
        System.out.printf("ZkDiverge: loaded %s at zxid 0x%x (%d znodes)%n", dataDir, zxid, tree.getNodeCount());
        long now = System.currentTimeMillis();
        for (int i = 1; i < args.length; i++) {
            switch (args[i]) {
                case "--delete": {
                    String path = args[++i];
                    PathUtils.validatePath(path);
                    if (tree.getNode(path) == null) {
                        throw new IllegalArgumentException("cannot delete " + path + ": no such znode");
                    }
                    delete(tree, path, zxid);
                    System.out.println("ZkDiverge: deleted " + path);
                    break;
                }
                case "--ghost": {
                    String path = args[++i];
                    long owner = Long.parseLong(args[++i]);
                    PathUtils.validatePath(path);
                    if (owner == 0) {
                        throw new IllegalArgumentException("ghost " + path + ": session id 0 owns no ephemeral");
                    }
                    // parentCVersion -1: the parent's cversion goes up by one, as for a create.
                    tree.createNode(path, new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE, owner, -1, zxid, now);
                    System.out.printf("ZkDiverge: created ephemeral %s of session 0x%x%n", path, owner);
                    break;
                }
                default:
                    throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        // The edits changed neither lastProcessedZxid nor the logged transactions, so this
        // snapshot is the newest and no logged transaction is replayed over it.
        tree.lastProcessedZxid = zxid;
        snapLog.save(tree, sessions, true);
        snapLog.close();
        System.out.printf("ZkDiverge: saved a snapshot at zxid 0x%x (%d znodes)%n", zxid, tree.getNodeCount());
    }

    /** Deletes path's subtree children first: DataTree.deleteNode leaves children behind. */
    private static void delete(DataTree tree, String path, long zxid) throws Exception {
        DataNode node = tree.getNode(path);
        List<String> children;
        synchronized (node) {
            children = new ArrayList<>(node.getChildren());
        }
        for (String child : children) {
            delete(tree, path.equals("/") ? "/" + child : path + "/" + child, zxid);
        }
        tree.deleteNode(path, zxid);
    }
}
